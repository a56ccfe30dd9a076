"""torchvision's ResNets (v1.5) in Gluon: the stem, basic blocks (ResNet-18/34), bottlenecks
(ResNet-50/101) and their stages, shared by the MXNet ResNet-50 classifier and Faster R-CNN's C4 trunk.
Each block runs its residual path before its projection shortcut, as torchvision's forward does."""

from __future__ import annotations

from typing import Any

from mxnet import gluon

# torchvision's depths: (block kind, blocks per stage); stage widths are 64, 128, 256, 512.
DEPTHS = {"resnet18": ("basic", (2, 2, 2, 2)), "resnet34": ("basic", (3, 4, 6, 3)),
          "resnet50": ("bottleneck", (3, 4, 6, 3)), "resnet101": ("bottleneck", (3, 4, 23, 3))}
WIDTHS = (64, 128, 256, 512)
EXPANSION = {"basic": 1, "bottleneck": 4}


def conv_bn(out: Any, channels: int, kernel: int, stride: int, cin: int, relu: bool = True) -> None:
    """Adds a bias-free convolution padded by kernel // 2 (PyTorch's padding), batch norm with
    PyTorch's defaults (eps 1e-5, momentum 0.1, i.e. 0.9 in MXNet's terms) and maybe a ReLU."""
    out.add(gluon.nn.Conv2D(channels, kernel, stride, kernel // 2, use_bias=False, in_channels=cin))
    out.add(gluon.nn.BatchNorm(momentum=0.9, epsilon=1e-5, in_channels=channels))
    if relu:
        out.add(gluon.nn.Activation("relu"))


class Block(gluon.HybridBlock):
    """A basic block (two 3x3) or a bottleneck (1x1, strided 3x3, 1x1 x4), with a 1x1 projection
    shortcut when the shape changes."""

    def __init__(self, kind: str, cin: int, width: int, stride: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        cout = width * EXPANSION[kind]
        with self.name_scope():
            self.residual = gluon.nn.HybridSequential(prefix="residual_")
            with self.residual.name_scope():
                if kind == "basic":
                    conv_bn(self.residual, width, 3, stride, cin)
                    conv_bn(self.residual, width, 3, 1, width, relu=False)
                else:
                    conv_bn(self.residual, width, 1, 1, cin)
                    conv_bn(self.residual, width, 3, stride, width)
                    conv_bn(self.residual, cout, 1, 1, width, relu=False)
            self.shortcut = None
            if stride != 1 or cin != cout:
                self.shortcut = gluon.nn.HybridSequential(prefix="shortcut_")
                with self.shortcut.name_scope():
                    conv_bn(self.shortcut, cout, 1, stride, cin, relu=False)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        out = self.residual(x)
        return F.relu(out + (self.shortcut(x) if self.shortcut is not None else x))


def add_stem(out: Any) -> int:
    """conv1 (7x7, stride 2), bn1, ReLU and the 3x3 max pool (stride 2); returns its width."""
    conv_bn(out, 64, 7, 2, 3)
    out.add(gluon.nn.MaxPool2D(3, 2, 1))
    return 64


def add_stage(out: Any, depth: str, stage: int, cin: int) -> int:
    """Stage `stage` (0-based: torchvision's layer{stage + 1}) of a ResNet; returns its width."""
    kind, counts = DEPTHS[depth]
    width, stride = WIDTHS[stage], 1 if stage == 0 else 2
    for i in range(counts[stage]):
        out.add(Block(kind, cin, width, stride if i == 0 else 1, prefix=f"stage{stage + 1}_block{i + 1}_"))
        cin = width * EXPANSION[kind]
    return cin
