"""EfficientDet-D0 on MXNet 1.9 Gluon: effdet's network written out in Gluon blocks, its anchor
labelling and losses, SGD, one training step.

The same network as pytorch.py (effdet 0.4.1's EfficientDet on timm's tf_efficientnet_b0) and as
tensorflow.py, which this file follows block for block: the EfficientNet-B0 backbone (TF "same"
padding, swish, squeeze-excite, stochastic depth 0.2 over its 16 blocks; batch norm eps 1e-3, PyTorch
momentum 0.1, i.e. 0.9 in MXNet's terms), the three BiFPN cells of 64 channels over P3-P7 with fast
normalized fusion (relu(w) / (sum + 1e-4)), and the class and box heads (three separable convolutions
with a batch norm per level, then a separable prediction); FPN and head batch norms have eps 1e-3 and
PyTorch momentum 0.01 (0.99 in MXNet's terms). Depthwise convolutions are Gluon Conv2D with groups =
channels (PyTorch's layout). TF's asymmetric "same" padding (timm's Conv2dSame, MaxPool2dSame) is an
explicit pad before the convolution or pooling where it is not symmetric; the pads are fixed by the
square input size. Layers are called in the order effdet calls its modules, so the adapters' canonical
layers line up. Anchors and effdet's target assignment run in NumPy on the host (effdet_d0.py, tensorflow.py's code too,
the same rules); the focal loss and the Huber box loss run in MXNet. Every size and rate comes from the
hyperparameters handed in (workload.toml); nothing here times, logs or profiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from _shared.sibling import load

_D0 = load("efficientdet", "effdet_d0")  # effdet_d0.py: the structure and anchor labelling, in NumPy
BLOCKS, FEATURE_STAGES, STEM = _D0.BLOCKS, _D0.FEATURE_STAGES, _D0.STEM
SE_RATIO, DROP_PATH, MIN_LEVEL = _D0.SE_RATIO, _D0.DROP_PATH, _D0.MIN_LEVEL
MAX_LEVEL, FPN_CHANNELS, FPN_CELLS = _D0.MAX_LEVEL, _D0.FPN_CHANNELS, _D0.FPN_CELLS
HEAD_REPEATS, ALPHA, GAMMA = _D0.HEAD_REPEATS, _D0.ALPHA, _D0.GAMMA
DELTA, BOX_LOSS_WEIGHT, FUSION_EPS = _D0.DELTA, _D0.BOX_LOSS_WEIGHT, _D0.FUSION_EPS
PRIOR, BACKBONE_MOMENTUM, FPN_MOMENTUM = _D0.PRIOR, _D0.BACKBONE_MOMENTUM, _D0.FPN_MOMENTUM
NORM_EPS, ANCHORS, NODES = _D0.NORM_EPS, _D0.ANCHORS, _D0.NODES
anchor_boxes, label_anchors = _D0.anchor_boxes, _D0.label_anchors


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TF's "same" padding of one spatial axis (timm's pad_same): before, after (after gets the odd one)."""
    total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class Pad(gluon.HybridBlock):
    """A constant pad of both spatial axes of NCHW maps: `before` rows/columns above/left, `after` below/right."""

    def __init__(self, before: int, after: int, value: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.width, self.value = (0, 0, 0, 0, before, after, before, after), value

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return F.pad(x, mode="constant", pad_width=self.width, constant_value=self.value)


def norm(channels: int, backbone: bool) -> gluon.nn.BatchNorm:
    """timm's tf_ EfficientNet batch norm (PyTorch momentum 0.1) or effdet's FPN and head batch norm
    (PyTorch momentum 0.01), eps 1e-3; MXNet's momentum is the old statistics' weight, 1 - PyTorch's."""
    return gluon.nn.BatchNorm(momentum=1.0 - (BACKBONE_MOMENTUM if backbone else FPN_MOMENTUM), epsilon=NORM_EPS,
                              in_channels=channels)


def conv(out: gluon.nn.HybridSequential, cin: int, cout: int, size: int, kernel: int = 1, stride: int = 1,
         groups: int = 1, bias: bool = False, bias_init: Any = "zeros") -> int:
    """Adds a convolution with TF "same" padding on a `size` x `size` input; returns its output size."""
    before, after = same_pads(size, kernel, stride)
    if before != after:
        out.add(Pad(before, after))
    out.add(gluon.nn.Conv2D(cout, kernel, stride, before if before == after else 0, groups=groups, use_bias=bias,
                            in_channels=cin, bias_initializer=bias_init))
    return math.ceil(size / stride)


def depthwise(out: gluon.nn.HybridSequential, channels: int, size: int, kernel: int, stride: int = 1) -> int:
    return conv(out, channels, channels, size, kernel, stride, groups=channels)


def max_pool(out: gluon.nn.HybridSequential, size: int) -> int:
    """timm's MaxPool2dSame (3x3, stride 2): pads of -inf, then a valid pooling."""
    before, after = same_pads(size, 3, 2)
    out.add(Pad(before, after, -math.inf))
    out.add(gluon.nn.MaxPool2D(3, 2, 0))
    return math.ceil(size / 2)


def swish(F: Any, x: Any) -> Any:
    """x sigmoid(x); the sigmoid through Activation (oneDNN's element-wise kernel on the CPU)."""
    return x * F.Activation(x, act_type="sigmoid")


class Swish(gluon.HybridBlock):
    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return swish(F, x)


class SqueezeExcite(gluon.HybridBlock):
    def __init__(self, channels: int, reduced: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.reduce = gluon.nn.Conv2D(reduced, 1, in_channels=channels)
            self.expand = gluon.nn.Conv2D(channels, 1, in_channels=reduced)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        s = self.reduce(F.mean(x, axis=(2, 3), keepdims=True))
        gate = F.Activation(self.expand(swish(F, s)), act_type="sigmoid")
        # x x gate as (N C) batched products of (H W, 1) x (1, 1): their backward is two more, where a
        # broadcast multiply's reduces over whole maps, 2-3x slower in MXNet 1.9 on the CPU
        out = F.batch_dot(F.reshape(x, (-3, -3, 1)), F.reshape(gate, (-3, 0, 0)))
        return F.reshape_like(out, x)


class Block(gluon.HybridBlock):
    """timm's DepthwiseSeparable ("ds": dw, bn, swish, SE, pw, bn) or InvertedResidual ("ir": pw, bn,
    swish, dw, bn, swish, SE, pw, bn); the identity shortcut with stochastic depth where shapes match
    (a per-sample Dropout mask, kept samples scaled by 1 / keep: timm's drop_path, in training only)."""

    def __init__(self, kind: str, cin: int, cout: int, size: int, kernel: int, stride: int, expansion: int,
                 drop: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        mid = cin * expansion
        with self.name_scope():
            self.body = gluon.nn.HybridSequential(prefix="body_")
            with self.body.name_scope():
                if kind == "ir":
                    conv(self.body, cin, mid, size)
                    self.body.add(norm(mid, True), Swish())
                self.size = depthwise(self.body, mid, size, kernel, stride)
                self.body.add(norm(mid, True), Swish(), SqueezeExcite(mid, max(1, int(cin * SE_RATIO))))
                conv(self.body, mid, cout, self.size)
                self.body.add(norm(cout, True))
        self.skip, self.drop = stride == 1 and cin == cout, drop

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        out = self.body(x)
        if not self.skip:
            return out
        if self.drop > 0:
            out = F.Dropout(out, p=self.drop, axes=(1, 2, 3))
        return out + x


class Fuse(gluon.HybridBlock):
    """effdet's FpnCombine "fastattn": sum of inputs x relu(w) / (sum relu(w) + 1e-4), w initialised to ones."""

    def __init__(self, count: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.count = count
        with self.name_scope():
            self.edge_weights = self.params.get("edge_weights", shape=(count,), init=mx.init.One())

    def hybrid_forward(self, F: Any, *inputs: Any, edge_weights: Any) -> Any:
        w = F.relu(edge_weights)
        w = F.broadcast_div(w, F.sum(w) + FUSION_EPS)
        # the weighted sum as one matrix product over the stacked inputs: its backward is two more
        # (a broadcast multiply's backward reduces over whole maps, slowly, in MXNet 1.9)
        return F.dot(F.stack(*inputs, axis=-1), w)


class Node(gluon.HybridBlock):
    """One BiFPN node: each input through a 1x1 conv + bn where its channels differ, resized to the
    node's level (nearest upsampling, 3x3 stride-2 "same" max pooling), fused, then swish, a separable
    3x3 convolution (pointwise with bias) and batch norm."""

    def __init__(self, level: int, sources: list[tuple[int, int, int]], sizes: dict[int, int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.offsets, self.ups = [offset for offset, _, _ in sources], []
        with self.name_scope():
            self.resample = []
            for i, (_, channels, source_level) in enumerate(sources):
                layers = gluon.nn.HybridSequential(prefix=f"resample{i}_")
                with layers.name_scope():
                    if channels != FPN_CHANNELS:
                        conv(layers, channels, FPN_CHANNELS, sizes[source_level], bias=True)
                        layers.add(norm(FPN_CHANNELS, False))
                    if source_level < level:
                        max_pool(layers, sizes[source_level])
                self.register_child(layers)
                self.resample.append(layers)
                self.ups.append(2 ** (source_level - level) if source_level > level else 1)
            self.fuse = Fuse(len(sources), prefix="fuse_")
            self.after = gluon.nn.HybridSequential(prefix="after_")
            with self.after.name_scope():
                depthwise(self.after, FPN_CHANNELS, sizes[level], 3)
                conv(self.after, FPN_CHANNELS, FPN_CHANNELS, sizes[level], bias=True)
                self.after.add(norm(FPN_CHANNELS, False))

    def hybrid_forward(self, F: Any, *nodes: Any) -> Any:
        resized = []
        for i, layers, up in zip(self.offsets, self.resample, self.ups):
            x = layers(nodes[i]) if len(layers) else nodes[i]
            resized.append(F.UpSampling(x, scale=up, sample_type="nearest") if up > 1 else x)
        return self.after(swish(F, self.fuse(*resized)))


class Head(gluon.HybridBlock):
    """effdet's HeadNet: per level, three separable convolutions each with that level's own batch norm
    and swish, then a separable prediction of outputs x 9 anchors (bias `bias_init`)."""

    def __init__(self, outputs: int, bias_init: float, sizes: dict[int, int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        size = sizes[MIN_LEVEL]  # stride-1 3x3 convolutions: symmetric pads at every level
        with self.name_scope():
            self.convs, self.norms = [], []
            for r in range(HEAD_REPEATS):
                layers = gluon.nn.HybridSequential(prefix=f"conv{r}_")
                with layers.name_scope():
                    depthwise(layers, FPN_CHANNELS, size, 3)
                    conv(layers, FPN_CHANNELS, FPN_CHANNELS, size, bias=True)
                self.register_child(layers)
                self.convs.append(layers)
                level_norms = []
                for level in range(MIN_LEVEL, MAX_LEVEL + 1):
                    bn = norm(FPN_CHANNELS, False)
                    self.register_child(bn, f"norm{r}_{level}")
                    level_norms.append(bn)
                self.norms.append(level_norms)
            self.predict = gluon.nn.HybridSequential(prefix="predict_")
            with self.predict.name_scope():
                depthwise(self.predict, FPN_CHANNELS, size, 3)
                conv(self.predict, FPN_CHANNELS, outputs * ANCHORS, size, bias=True,
                     bias_init=mx.init.Constant(bias_init))

    def hybrid_forward(self, F: Any, *features: Any) -> Any:
        out = []
        for level, x in enumerate(features):
            for convs, norms in zip(self.convs, self.norms):
                x = swish(F, norms[level](convs(x)))
            out.append(self.predict(x))
        return tuple(out)


class EfficientDet(gluon.HybridBlock):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        size = hp["image_size"]
        with self.name_scope():
            self.stem = gluon.nn.HybridSequential(prefix="stem_")
            with self.stem.name_scope():
                size = conv(self.stem, 3, STEM, size, 3, 2)
                self.stem.add(norm(STEM, True), Swish())
            total = sum(repeats for _, repeats, *_ in BLOCKS)
            self.stages, cin, index, channels, sizes = [], STEM, 0, [], {}
            for s, (kind, repeats, kernel, stride, expansion, cout) in enumerate(BLOCKS):
                stage = gluon.nn.HybridSequential(prefix=f"stage{s}_")
                with stage.name_scope():
                    for i in range(repeats):
                        block = Block(kind, cin, cout, size, kernel, stride if i == 0 else 1, expansion,
                                      DROP_PATH * index / total, prefix=f"block{i}_")
                        stage.add(block)
                        cin, index, size = cout, index + 1, block.size
                self.register_child(stage)
                self.stages.append(stage)
                channels.append(cout)
                if s in FEATURE_STAGES:
                    sizes[MIN_LEVEL + FEATURE_STAGES.index(s)] = size
            # P6 from C5 (1x1 conv + bn, then max pooling), P7 from P6 (max pooling)
            self.p6 = gluon.nn.HybridSequential(prefix="p6_")
            with self.p6.name_scope():
                conv(self.p6, channels[FEATURE_STAGES[-1]], FPN_CHANNELS, sizes[5], bias=True)
                self.p6.add(norm(FPN_CHANNELS, False))
                sizes[6] = max_pool(self.p6, sizes[5])
            self.p7 = gluon.nn.HybridSequential(prefix="p7_")
            with self.p7.name_scope():
                sizes[7] = max_pool(self.p7, sizes[6])
            self.cells = []
            for cell in range(FPN_CELLS):
                inputs = ([(channels[s], MIN_LEVEL + i) for i, s in enumerate(FEATURE_STAGES)]
                          + [(FPN_CHANNELS, 6), (FPN_CHANNELS, 7)]) if cell == 0 else \
                    [(FPN_CHANNELS, level) for level in range(MIN_LEVEL, MAX_LEVEL + 1)]
                known, nodes = list(inputs), []
                for n, (level, offsets) in enumerate(NODES):
                    node = Node(level, [(o, *known[o]) for o in offsets], sizes, prefix=f"cell{cell}_node{n}_")
                    self.register_child(node)
                    nodes.append(node)
                    known.append((FPN_CHANNELS, level))
                self.cells.append(nodes)
            self.class_net = Head(hp["num_classes"], -math.log((1 - PRIOR) / PRIOR), sizes, prefix="class_net_")
            self.box_net = Head(4, 0.0, sizes, prefix="box_net_")

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        x = self.stem(x)
        features = []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in FEATURE_STAGES:
                features.append(x)
        p6 = self.p6(features[-1])
        features += [p6, self.p7(p6)]
        for cell in self.cells:
            nodes = list(features)
            for node in cell:
                nodes.append(node(*nodes))
            features = nodes[-len(features):]
        return (*self.class_net(*features), *self.box_net(*features))


# ---------------------------------------------------------------------------------------------
# Training


def flatten(outputs: Any, width: int) -> Any:
    """Per-level (N, anchors x width, H, W) maps -> (N, total anchors, width), level, location, anchor order."""
    return mx.nd.concat(*[o.transpose((0, 2, 3, 1)).reshape((0, -1, width)) for o in outputs], dim=1)


def detection_loss(class_out: list[Any], box_out: list[Any], cls_targets: Any, box_targets: Any,
                   positives: float, num_classes: int) -> Any:
    """effdet's loss_fn: the focal loss summed over anchors not ignored, plus 50 x the Huber box loss
    over nonzero targets, both over (positives + 1) (the box loss also over 4)."""
    logits = flatten(class_out, num_classes).astype("float32")
    boxes = flatten(box_out, 4).astype("float32")
    normalizer = positives + 1.0
    targets = mx.nd.one_hot(cls_targets, num_classes)  # -1 (background) is all zeros
    p = mx.nd.sigmoid(logits)
    p_t = targets * p + (1.0 - targets) * (1.0 - p)
    alpha = targets * ALPHA + (1.0 - targets) * (1.0 - ALPHA)
    ce = mx.nd.relu(logits) - logits * targets + mx.nd.log1p(mx.nd.exp(-mx.nd.abs(logits)))
    keep = (cls_targets != -2).astype("float32").expand_dims(-1)
    focal = alpha * (1.0 - p_t) ** GAMMA * ce * keep
    err = mx.nd.abs(boxes - box_targets)
    quadratic = mx.nd.minimum(err, DELTA)
    huber = (0.5 * quadratic ** 2 + DELTA * (err - quadratic)) * (box_targets != 0.0)
    return focal.sum() / normalizer + BOX_LOSS_WEIGHT * huber.sum() / (normalizer * 4.0)


@dataclass
class Training:
    model: EfficientDet
    trainer: gluon.Trainer
    anchors: np.ndarray
    hp: dict[str, Any]


def build(hp: dict[str, Any], ctx: mx.Context) -> Training:
    model = EfficientDet(hp, prefix="efficientdet_")
    # Glorot-uniform convolutions (as tensorflow.py's Keras defaults); biases zero but the class prior,
    # batch norms and fusion weights take their blocks' own initializers.
    model.initialize(mx.init.Xavier(rnd_type="uniform", factor_type="avg", magnitude=3), ctx=ctx)
    model.hybridize(static_alloc=True)
    trainer = gluon.Trainer(model.collect_params(), "sgd", {
        "learning_rate": hp["learning_rate"], "momentum": hp["momentum"],
        "wd": hp["weight_decay"],  # coupled L2 (grad + wd x weight), as PyTorch's SGD
    })
    return Training(model, trainer, anchor_boxes(hp["image_size"]), hp)


def to_device(batch: Any, ctx: mx.Context) -> dict[str, Any]:
    """The images (each at its own size, (3, H, W)) on the device; the targets stay NumPy (labelled on the host)."""
    return {"images": [mx.nd.array(image, ctx=ctx) for image in batch.images], "targets": batch.targets}


def resize_pad(training: Training, images: list[Any], targets: list[dict[str, np.ndarray]]) -> tuple[Any, np.ndarray, np.ndarray, float]:
    """effdet's input, as pytorch.py makes it: the long side scaled to the square input (bilinear, half-pixel
    centres), padded at the bottom and right, normalized; the boxes scaled to match and labelled."""
    hp, size, ctx = training.hp, training.hp["image_size"], images[0].context
    mean = mx.nd.array(hp["pixel_mean"], ctx=ctx).reshape((1, 3, 1, 1))
    std = mx.nd.array(hp["pixel_std"], ctx=ctx).reshape((1, 3, 1, 1))
    padded, cls_all, box_all, positives = [], [], [], 0
    for image, target in zip(images, targets):
        h, w = int(image.shape[1]), int(image.shape[2])
        scale = size / max(h, w)
        nh, nw = min(size, round(h * scale)), min(size, round(w * scale))
        resized = mx.nd.contrib.BilinearResize2D(image.expand_dims(0), height=nh, width=nw, align_corners=False)
        normalized = mx.nd.broadcast_div(mx.nd.broadcast_sub(resized, mean), std)
        padded.append(mx.nd.pad(normalized, mode="constant", pad_width=(0, 0, 0, 0, 0, size - nh, 0, size - nw)))
        boxes = np.asarray(target["boxes"], np.float32)[:, [1, 0, 3, 2]] * scale
        cls, box, count = label_anchors(training.anchors, boxes, np.asarray(target["labels"]).astype(np.int64))
        cls_all.append(cls)
        box_all.append(box)
        positives += count
    return mx.nd.concat(*padded, dim=0), np.stack(cls_all), np.stack(box_all), float(positives)


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The network alone in inference mode: class logits and box outputs, all levels, as
    (N, anchors, classes) and (N, anchors, 4) NumPy."""
    images, _, _, _ = resize_pad(training, inputs["images"], inputs["targets"])
    out = training.model(images)
    levels = MAX_LEVEL - MIN_LEVEL + 1
    return {"class_logits": flatten(out[:levels], training.hp["num_classes"]).asnumpy(),
            "box_outputs": flatten(out[levels:], 4).asnumpy()}


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> Any:
    """One SGD step on effdet's focal classification loss plus its weighted box loss."""
    images, cls_targets, box_targets, positives = resize_pad(training, inputs["images"], inputs["targets"])
    ctx = images.context
    cls_nd, box_nd = mx.nd.array(cls_targets, ctx=ctx, dtype="int64"), mx.nd.array(box_targets, ctx=ctx)
    levels = MAX_LEVEL - MIN_LEVEL + 1
    with autograd.record():
        out = training.model(images)
        loss = detection_loss(out[:levels], out[levels:], cls_nd, box_nd, positives, training.hp["num_classes"])
        with precision.scale_loss(loss, training.trainer) as scaled:
            autograd.backward(scaled)
    training.trainer.step(1)  # the loss is already normalized
    return loss
