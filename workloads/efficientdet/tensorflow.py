"""EfficientDet-D0 on TensorFlow 2 / Keras 3: effdet's network written out in Keras, its anchor
labelling and losses, SGD, one training step.

The same network as pytorch.py (effdet 0.4.1's EfficientDet on timm's tf_efficientnet_b0): the
EfficientNet-B0 backbone (TF "same" padding, swish, squeeze-excite, stochastic depth 0.2 over its 16
blocks; batch norm eps 1e-3, PyTorch momentum 0.1), the three BiFPN cells of 64 channels over P3-P7
with fast normalized fusion (relu(w) / (sum + 1e-4)), and the class and box heads (three separable
convolutions with a batch norm per level, then a separable prediction); FPN and head batch norms have
eps 1e-3 and PyTorch momentum 0.01. Layers are called in the order effdet calls its modules, so the
adapters' canonical layers line up. Anchors (3 octaves x 3 aspects, scale 4) and effdet's target
assignment (IoU 0.5 argmax matching, each box forced to its best anchor, Faster R-CNN box encoding)
run in NumPy on the host; the focal loss (alpha, gamma from effdet's D0 config) and the Huber box
loss (delta 0.1, weight 50) run in the compiled step. Every size and rate comes from the
hyperparameters handed in (workload.toml); nothing here times, logs or profiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from _shared.sibling import load
from _shared.tf_amp import built, scaled_update

_D0 = load("efficientdet", "effdet_d0")  # effdet_d0.py: the structure and anchor labelling, in NumPy
BLOCKS, FEATURE_STAGES, STEM = _D0.BLOCKS, _D0.FEATURE_STAGES, _D0.STEM
SE_RATIO, DROP_PATH, MIN_LEVEL = _D0.SE_RATIO, _D0.DROP_PATH, _D0.MIN_LEVEL
MAX_LEVEL, FPN_CHANNELS, FPN_CELLS = _D0.MAX_LEVEL, _D0.FPN_CHANNELS, _D0.FPN_CELLS
HEAD_REPEATS, ALPHA, GAMMA = _D0.HEAD_REPEATS, _D0.ALPHA, _D0.GAMMA
DELTA, BOX_LOSS_WEIGHT, FUSION_EPS = _D0.DELTA, _D0.BOX_LOSS_WEIGHT, _D0.FUSION_EPS
PRIOR, ANCHORS, NODES = _D0.PRIOR, _D0.ANCHORS, _D0.NODES
anchor_boxes, label_anchors = _D0.anchor_boxes, _D0.label_anchors


def backbone_norm() -> keras.layers.BatchNormalization:
    """timm's tf_ EfficientNet batch norm: eps 1e-3, PyTorch momentum 0.1 (0.9 in Keras' terms)."""
    return keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-3)


def fpn_norm() -> keras.layers.BatchNormalization:
    """effdet's FPN and head batch norm: eps 1e-3, PyTorch momentum 0.01 (0.99 in Keras' terms)."""
    return keras.layers.BatchNormalization(momentum=0.99, epsilon=1e-3)


def conv(filters: int, kernel: int = 1, stride: int = 1, bias: bool = False) -> keras.layers.Conv2D:
    return keras.layers.Conv2D(filters, kernel, stride, padding="same", use_bias=bias)


def depthwise(kernel: int, stride: int = 1) -> keras.layers.DepthwiseConv2D:
    return keras.layers.DepthwiseConv2D(kernel, stride, padding="same", use_bias=False)


def run(layers: list[Any], x: tf.Tensor, training: bool) -> tf.Tensor:
    for layer in layers:
        x = layer(x, training=training) if isinstance(layer, keras.layers.Layer) else layer(x)
    return x


class SqueezeExcite(keras.layers.Layer):
    def __init__(self, channels: int, reduced: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reduce, self.expand = conv(reduced, bias=True), conv(channels, bias=True)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        s = tf.reduce_mean(x, axis=(1, 2), keepdims=True)
        return x * tf.sigmoid(self.expand(tf.nn.silu(self.reduce(s))))


class Block(keras.layers.Layer):
    """timm's DepthwiseSeparable ("ds": dw, bn, swish, SE, pw, bn) or InvertedResidual ("ir": pw, bn,
    swish, dw, bn, swish, SE, pw, bn); the identity shortcut with stochastic depth where shapes match."""

    def __init__(self, kind: str, cin: int, cout: int, kernel: int, stride: int, expansion: int,
                 drop: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        mid = cin * expansion
        expand = [conv(mid), backbone_norm(), tf.nn.silu] if kind == "ir" else []
        self.layers_ = [*expand, depthwise(kernel, stride), backbone_norm(), tf.nn.silu,
                        SqueezeExcite(mid, max(1, int(cin * SE_RATIO))), conv(cout), backbone_norm()]
        self.skip, self.drop = stride == 1 and cin == cout, drop

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        out = run(self.layers_, x, training)
        if not self.skip:
            return out
        if training and self.drop > 0:  # timm's drop_path: per sample, kept ones scaled by 1 / keep
            keep = 1.0 - self.drop
            mask = tf.floor(keep + tf.random.uniform((tf.shape(x)[0], 1, 1, 1), dtype=out.dtype))
            out = out / keep * mask
        return out + x


class Fuse(keras.layers.Layer):
    """effdet's FpnCombine "fastattn": sum of inputs x relu(w) / (sum relu(w) + 1e-4), w initialised to ones."""

    def __init__(self, count: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.edge_weights = self.add_weight(shape=(count,), initializer="ones", name="edge_weights")

    def call(self, inputs: list[tf.Tensor]) -> tf.Tensor:
        w = tf.nn.relu(tf.cast(self.edge_weights, inputs[0].dtype))
        w = w / (tf.reduce_sum(w) + FUSION_EPS)
        return tf.add_n([x * w[i] for i, x in enumerate(inputs)])


class Node(keras.layers.Layer):
    """One BiFPN node: each input through a 1x1 conv + bn where its channels differ, resized to the
    node's level (nearest upsampling, 3x3 stride-2 "same" max pooling), fused, then swish, a separable
    3x3 convolution (pointwise with bias) and batch norm."""

    def __init__(self, level: int, sources: list[tuple[int, int, int]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.level, self.offsets = level, [offset for offset, _, _ in sources]
        self.resample = []
        for _, channels, source_level in sources:
            layers: list[Any] = [conv(FPN_CHANNELS, bias=True), fpn_norm()] if channels != FPN_CHANNELS else []
            if source_level < level:
                layers += [keras.layers.MaxPooling2D(3, 2 ** (level - source_level), padding="same")]
            elif source_level > level:
                layers += [keras.layers.UpSampling2D(2 ** (source_level - level))]
            self.resample.append(layers)
        self.fuse = Fuse(len(sources))
        self.after = [depthwise(3), conv(FPN_CHANNELS, bias=True), fpn_norm()]

    def call(self, nodes: list[tf.Tensor], training: bool = False) -> tf.Tensor:
        x = self.fuse([run(layers, nodes[i], training) for i, layers in zip(self.offsets, self.resample)])
        return run(self.after, tf.nn.silu(x), training)


class Head(keras.layers.Layer):
    """effdet's HeadNet: per level, three separable convolutions each with that level's own batch norm
    and swish, then a separable prediction of outputs x 9 anchors (bias `bias_init`)."""

    def __init__(self, outputs: int, bias_init: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.convs = [[depthwise(3), conv(FPN_CHANNELS, bias=True)] for _ in range(HEAD_REPEATS)]
        self.norms = [[fpn_norm() for _ in range(MIN_LEVEL, MAX_LEVEL + 1)] for _ in range(HEAD_REPEATS)]
        self.predict = [depthwise(3), keras.layers.Conv2D(
            outputs * ANCHORS, 1, bias_initializer=keras.initializers.Constant(bias_init))]

    def call(self, features: list[tf.Tensor], training: bool = False) -> list[tf.Tensor]:
        out = []
        for level, x in enumerate(features):
            for convs, norms in zip(self.convs, self.norms):
                x = tf.nn.silu(norms[level](run(convs, x, training), training=training))
            out.append(run(self.predict, x, training))
        return out


class EfficientDet(keras.Model):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="efficientdet")
        self.stem = [conv(STEM, 3, 2), backbone_norm()]
        total = sum(repeats for _, repeats, *_ in BLOCKS)
        self.stages, cin, index, channels = [], STEM, 0, []
        for kind, repeats, kernel, stride, expansion, cout in BLOCKS:
            stage = []
            for i in range(repeats):
                stage.append(Block(kind, cin, cout, kernel, stride if i == 0 else 1, expansion,
                                   DROP_PATH * index / total))
                cin, index = cout, index + 1
            self.stages.append(stage)
            channels.append(cout)
        # P6 from C5 (1x1 conv + bn, then max pooling), P7 from P6 (max pooling)
        self.p6 = [conv(FPN_CHANNELS, bias=True), fpn_norm(), keras.layers.MaxPooling2D(3, 2, padding="same")]
        self.p7 = keras.layers.MaxPooling2D(3, 2, padding="same")
        self.cells = []
        for cell in range(FPN_CELLS):
            inputs = ([(channels[s], MIN_LEVEL + i) for i, s in enumerate(FEATURE_STAGES)]
                      + [(FPN_CHANNELS, 6), (FPN_CHANNELS, 7)]) if cell == 0 else \
                [(FPN_CHANNELS, level) for level in range(MIN_LEVEL, MAX_LEVEL + 1)]
            known = list(inputs)
            nodes = []
            for level, offsets in NODES:
                nodes.append(Node(level, [(o, *known[o]) for o in offsets]))
                known.append((FPN_CHANNELS, level))
            self.cells.append(nodes)
        self.class_net = Head(hp["num_classes"], -math.log((1 - PRIOR) / PRIOR))
        self.box_net = Head(4, 0.0)

    def call(self, x: tf.Tensor, training: bool = False) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
        x = tf.nn.silu(run(self.stem, x, training))
        features = []
        for i, stage in enumerate(self.stages):
            x = run(stage, x, training)
            if i in FEATURE_STAGES:
                features.append(x)
        p6 = run(self.p6, features[-1], training)
        features += [p6, self.p7(p6)]
        for cell in self.cells:
            nodes = list(features)
            for node in cell:
                nodes.append(node(nodes, training=training))
            features = nodes[-len(features):]
        return self.class_net(features, training=training), self.box_net(features, training=training)


# ---------------------------------------------------------------------------------------------
# Training


def detection_loss(class_out: list[tf.Tensor], box_out: list[tf.Tensor], cls_targets: tf.Tensor,
                   box_targets: tf.Tensor, positives: tf.Tensor, num_classes: int) -> tf.Tensor:
    """effdet's loss_fn: the focal loss summed over anchors not ignored, plus 50 x the Huber box loss
    over nonzero targets, both over (positives + 1) (the box loss also over 4)."""
    batch = tf.shape(cls_targets)[0]
    logits = tf.concat([tf.reshape(tf.cast(c, tf.float32), (batch, -1, num_classes)) for c in class_out], axis=1)
    boxes = tf.concat([tf.reshape(tf.cast(b, tf.float32), (batch, -1, 4)) for b in box_out], axis=1)
    normalizer = tf.cast(positives, tf.float32) + 1.0
    targets = tf.one_hot(cls_targets, num_classes)  # -1 (background) is all zeros
    p = tf.sigmoid(logits)
    p_t = targets * p + (1.0 - targets) * (1.0 - p)
    alpha = targets * ALPHA + (1.0 - targets) * (1.0 - ALPHA)
    ce = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=logits)
    focal = alpha * tf.pow(1.0 - p_t, GAMMA) * ce * tf.cast(cls_targets != -2, tf.float32)[..., None]
    err = tf.abs(boxes - box_targets)
    quadratic = tf.minimum(err, DELTA)
    huber = (0.5 * quadratic ** 2 + DELTA * (err - quadratic)) * tf.cast(box_targets != 0.0, tf.float32)
    return tf.reduce_sum(focal) / normalizer + BOX_LOSS_WEIGHT * tf.reduce_sum(huber) / (normalizer * 4.0)


def l2_penalty(variables: list[tf.Variable], decay: float) -> tf.Tensor:
    """decay / 2 x the sum of squared weights: its gradient is PyTorch's coupled weight decay."""
    return 0.5 * decay * tf.add_n([tf.reduce_sum(tf.square(tf.cast(v, tf.float32))) for v in variables])


@dataclass
class Training:
    model: EfficientDet
    optimizer: keras.optimizers.Optimizer
    step: Any  # the compiled step
    anchors: np.ndarray
    hp: dict[str, Any]


def build(hp: dict[str, Any], precision: Any) -> Training:
    size, classes, decay = hp["image_size"], hp["num_classes"], hp["weight_decay"]
    model = EfficientDet(hp)
    # built by one call on zeros: no weight depends on the image's size, so the smallest image every level takes
    # (the coarsest, P7, then 1 x 1) builds the same network, its weights drawn in the same order, for less work
    model(tf.zeros((1, 2**MAX_LEVEL, 2**MAX_LEVEL, 3)))
    optimizer = built(precision.wrap_optimizer(keras.optimizers.SGD(hp["learning_rate"], momentum=hp["momentum"])),
                      model.trainable_variables)
    anchors = anchor_boxes(size)

    @tf.function(input_signature=[tf.TensorSpec((None, size, size, 3), tf.float32),
                                  tf.TensorSpec((None, len(anchors)), tf.int64),
                                  tf.TensorSpec((None, len(anchors), 4), tf.float32), tf.TensorSpec((), tf.float32)])
    def step(images: tf.Tensor, cls_targets: tf.Tensor, box_targets: tf.Tensor, positives: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            class_out, box_out = model(images, training=True)
            loss = detection_loss(class_out, box_out, cls_targets, box_targets, positives, classes)
            regularized = loss + l2_penalty(model.trainable_variables, decay)
        scaled_update(tape, regularized, optimizer, model.trainable_variables)
        return loss

    return Training(model, optimizer, step, anchors, hp)


def to_device(batch: Any, device: str) -> dict[str, Any]:
    """The images (each at its own size, channels last) on `device`; the targets stay NumPy (labelled on the host)."""
    with tf.device(device):
        images = [tf.constant(np.ascontiguousarray(image.transpose(1, 2, 0))) for image in batch.images]
    return {"images": images, "targets": batch.targets}


def resize_pad(training: Training, images: list[tf.Tensor], targets: list[dict[str, np.ndarray]]) -> tuple[tf.Tensor, np.ndarray, np.ndarray, float]:
    """effdet's input, as pytorch.py makes it: the long side scaled to the square input (bilinear, half-pixel
    centres), padded at the bottom and right, normalized; the boxes scaled to match and labelled."""
    hp, size = training.hp, training.hp["image_size"]
    mean, std = np.asarray(hp["pixel_mean"], np.float32), np.asarray(hp["pixel_std"], np.float32)
    padded, cls_all, box_all, positives = [], [], [], 0
    for image, target in zip(images, targets):
        h, w = int(image.shape[0]), int(image.shape[1])
        scale = size / max(h, w)
        nh, nw = min(size, round(h * scale)), min(size, round(w * scale))
        resized = (tf.image.resize(image, (nh, nw), method="bilinear") - mean) / std
        padded.append(tf.pad(resized, ((0, size - nh), (0, size - nw), (0, 0))))
        boxes = np.asarray(target["boxes"], np.float32)[:, [1, 0, 3, 2]] * scale
        cls, box, count = label_anchors(training.anchors, boxes, np.asarray(target["labels"]).astype(np.int64))
        cls_all.append(cls)
        box_all.append(box)
        positives += count
    return tf.stack(padded), np.stack(cls_all), np.stack(box_all), float(positives)


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The network alone in inference mode, run eagerly: class logits and box outputs, all levels, as
    (N, anchors, classes) and (N, anchors, 4) NumPy."""
    images, _, _, _ = resize_pad(training, inputs["images"], inputs["targets"])
    class_out, box_out = training.model(images, training=False)
    n, classes = int(images.shape[0]), training.hp["num_classes"]
    return {"class_logits": np.concatenate([c.numpy().reshape(n, -1, classes) for c in class_out], axis=1),
            "box_outputs": np.concatenate([b.numpy().reshape(n, -1, 4) for b in box_out], axis=1)}


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> tf.Tensor:
    """One SGD step on effdet's focal classification loss plus its weighted box loss."""
    images, cls_targets, box_targets, positives = resize_pad(training, inputs["images"], inputs["targets"])
    return training.step(images, tf.constant(cls_targets), tf.constant(box_targets), tf.constant(positives))
