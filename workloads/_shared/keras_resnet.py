"""torchvision's ResNets in Keras 3, channels last: basic blocks (ResNet-18/34) and v1.5 bottlenecks
(ResNet-50/101; the stride on the 3x3), PyTorch's symmetric padding, BatchNorm2d's defaults and
Kaiming-normal (fan out) convolutions. Each block runs its residual path before its projection
shortcut, as torchvision does (the canonical layer order follows the calls)."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

# (block, blocks per stage) of torchvision's resnet18/34/50/101; stage widths 64, 128, 256, 512
DEPTHS = {"resnet18": ("basic", (2, 2, 2, 2)), "resnet34": ("basic", (3, 4, 6, 3)),
          "resnet50": ("bottleneck", (3, 4, 6, 3)), "resnet101": ("bottleneck", (3, 4, 23, 3))}
WIDTHS, STRIDES = (64, 128, 256, 512), (1, 2, 2, 2)


def conv_init() -> keras.initializers.Initializer:
    """torchvision's Kaiming-normal (fan out, ReLU gain), one per layer: a Keras 3 initializer draws its seed
    when made (from the seeded Python generator, so made after the run's seed) and gives every layer it
    initialises the same values; one shared instance would make same-shaped layers equal."""
    return keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")


def conv(filters: int, kernel: int, stride: int = 1, name: str | None = None) -> list[keras.layers.Layer]:
    """A bias-free convolution padded by kernel // 2 on every side (PyTorch's padding), channels last."""
    pad = kernel // 2
    layers: list[keras.layers.Layer] = [keras.layers.ZeroPadding2D(pad)] if pad and stride > 1 else []
    padding = "same" if pad and stride == 1 else "valid"
    return layers + [keras.layers.Conv2D(filters, kernel, stride, padding=padding, use_bias=False,
                                         kernel_initializer=conv_init(), name=name)]


def batch_norm(name: str | None = None) -> keras.layers.BatchNormalization:
    """PyTorch's BatchNorm2d defaults: eps 1e-5, running averages with momentum 0.1 (0.9 in Keras' terms)."""
    return keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=name)


def run(layers: list[keras.layers.Layer], x: tf.Tensor, training: bool) -> tf.Tensor:
    for layer in layers:
        x = layer(x, training=training)
    return x


class Block(keras.layers.Layer):
    """A residual block: the path, the projection shortcut (1x1 with stride, batch norm) where the
    shape changes, ReLU after the sum."""

    def __init__(self, residual: list[keras.layers.Layer], out: int, stride: int, project: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.residual = residual
        self.shortcut = [*conv(out, 1, stride), batch_norm()] if project else []

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        out = run(self.residual, x, training)
        return tf.nn.relu(out + run(self.shortcut, x, training))


def bottleneck(width: int, stride: int, project: bool) -> Block:
    """1x1 (width), 3x3 (width, stride), 1x1 (4 x width), each with batch norm."""
    return Block([*conv(width, 1), batch_norm(), keras.layers.ReLU(),
                  *conv(width, 3, stride), batch_norm(), keras.layers.ReLU(),
                  *conv(width * 4, 1), batch_norm()], width * 4, stride, project)


def basic(width: int, stride: int, project: bool) -> Block:
    """3x3 (width, stride), 3x3 (width), each with batch norm."""
    return Block([*conv(width, 3, stride), batch_norm(), keras.layers.ReLU(),
                  *conv(width, 3), batch_norm()], width, stride, project)


def stem() -> list[keras.layers.Layer]:
    """conv1 (7x7, stride 2), batch norm, ReLU, 3x3 max pool (stride 2; zero padding = -inf after ReLU)."""
    return [*conv(64, 7, 2), batch_norm(), keras.layers.ReLU(), keras.layers.ZeroPadding2D(1),
            keras.layers.MaxPooling2D(3, 2)]


def stages(depth: str) -> list[list[Block]]:
    """The four stages (conv2 to conv5) of torchvision's `depth` as lists of blocks."""
    kind, counts = DEPTHS[depth]
    make, expansion = (basic, 1) if kind == "basic" else (bottleneck, 4)
    out, channels = [], 64
    for width, count, stride in zip(WIDTHS, counts, STRIDES):
        blocks = []
        for i in range(count):
            project = i == 0 and (stride != 1 or channels != width * expansion)
            blocks.append(make(width, stride if i == 0 else 1, project))
            channels = width * expansion
        out.append(blocks)
    return out


def width(depth: str, stage: int) -> int:
    """Output channels of stage `stage` (0 = conv2) of `depth`."""
    return WIDTHS[stage] * (1 if DEPTHS[depth][0] == "basic" else 4)
