"""Faster R-CNN on TensorFlow 2 / Keras 3: torchvision's FasterRCNN rebuilt from TF ops on a ResNet
C4 trunk, SGD with momentum and coupled weight decay, one training step.

The same network and algorithm as pytorch.py: conv1-conv4 shared by the RPN and RoI align, conv5 +
global average pooling as the per-RoI head; the resize + normalisation inside the model
(GeneralizedRCNNTransform, padded to a multiple of 32), anchors (AnchorGenerator), the RPN's matcher,
sampler, proposals with NMS and its two losses, the detector's RoI sampling with the ground truth
added, box coding with weights (1, 1, 1, 1) and (10, 10, 5, 5), smooth L1 with beta 1/9. RoI align is
tf.image.crop_and_resize on a 2x2 grid per bin, averaged (torchvision's sampling_ratio 2, aligned
False). Every size and rate comes from the hyperparameters handed in (workload.toml); nothing here
times, logs or profiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from _shared.keras_classifier import l2_penalty
from _shared.keras_resnet import run, stages, stem, width
from _shared.tf_amp import built, scaled_update

BBOX_CLIP = math.log(1000.0 / 16)  # torchvision's BoxCoder clamp on dw, dh
RPN_WEIGHTS, ROI_WEIGHTS = (1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 5.0, 5.0)
SMOOTH_L1_BETA = 1.0 / 9
SIZE_DIVISIBLE = 32


# --------------------------------------------------------------------------------------------
# Boxes (x1, y1, x2, y2), as torchvision.ops / BoxCoder


def box_iou(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """(len(a), len(b)) intersection over union."""
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    lt = tf.maximum(a[:, None, :2], b[None, :, :2])
    rb = tf.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = tf.maximum(rb - lt, 0.0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def encode(gt: tf.Tensor, ref: tf.Tensor, weights: tuple[float, ...]) -> tf.Tensor:
    """Regression targets of boxes `gt` relative to `ref` (BoxCoder.encode)."""
    wx, wy, ww, wh = weights
    pw, ph = ref[:, 2] - ref[:, 0], ref[:, 3] - ref[:, 1]
    px, py = ref[:, 0] + 0.5 * pw, ref[:, 1] + 0.5 * ph
    gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
    gx, gy = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
    return tf.stack([wx * (gx - px) / pw, wy * (gy - py) / ph, ww * tf.math.log(gw / pw),
                     wh * tf.math.log(gh / ph)], axis=1)


def decode(deltas: tf.Tensor, ref: tf.Tensor, weights: tuple[float, ...]) -> tf.Tensor:
    """Boxes from regression `deltas` (N, 4) relative to `ref` (BoxCoder.decode, dw/dh clamped)."""
    wx, wy, ww, wh = weights
    pw, ph = ref[:, 2] - ref[:, 0], ref[:, 3] - ref[:, 1]
    px, py = ref[:, 0] + 0.5 * pw, ref[:, 1] + 0.5 * ph
    dx, dy = deltas[:, 0] / wx, deltas[:, 1] / wy
    dw, dh = tf.minimum(deltas[:, 2] / ww, BBOX_CLIP), tf.minimum(deltas[:, 3] / wh, BBOX_CLIP)
    cx, cy, w, h = dx * pw + px, dy * ph + py, tf.exp(dw) * pw, tf.exp(dh) * ph
    return tf.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=1)


def smooth_l1_sum(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    n = tf.abs(x - y)
    return tf.reduce_sum(tf.where(n < SMOOTH_L1_BETA, 0.5 * n * n / SMOOTH_L1_BETA, n - 0.5 * SMOOTH_L1_BETA))


def match(iou: tf.Tensor, high: float, low: float, low_quality: bool) -> tf.Tensor:
    """torchvision's Matcher: per column the best row, -1 below `low`, -2 between; with `low_quality`
    each row's best columns keep their match."""
    vals, matches = tf.reduce_max(iou, axis=0), tf.argmax(iou, axis=0, output_type=tf.int32)
    out = tf.where(vals < low, -1, tf.where(vals < high, -2, matches))
    if low_quality:
        best = tf.reduce_any(iou == tf.reduce_max(iou, axis=1, keepdims=True), axis=0)
        out = tf.where(best, matches, out)
    return out


def sample(labels: tf.Tensor, size: int, positive_fraction: float) -> tuple[tf.Tensor, tf.Tensor]:
    """BalancedPositiveNegativeSampler: indices of up to size x fraction positives (labels >= 1) and
    negatives (labels == 0) to fill `size`, drawn at random."""
    pos = tf.random.shuffle(tf.where(labels >= 1)[:, 0])
    neg = tf.random.shuffle(tf.where(labels == 0)[:, 0])
    n_pos = tf.minimum(int(size * positive_fraction), tf.size(pos))
    n_neg = tf.minimum(size - n_pos, tf.size(neg))
    return pos[:n_pos], neg[:n_neg]


def rpn_sample(boxes: tf.Tensor, anchors: tf.Tensor, logits: tf.Tensor, deltas: tf.Tensor, hp: dict[str, Any]
               ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """One image's RPN targets: anchors matched at rpn_fg_iou / rpn_bg_iou (low-quality matches kept),
    rpn_batch_size drawn; the positives' summed box smooth L1, the drawn objectness logits and their labels."""
    matched = match(box_iou(boxes, anchors), hp["rpn_fg_iou"], hp["rpn_bg_iou"], True)
    lab = tf.where(matched >= 0, 1, tf.where(matched == -1, 0, -1))
    pos, neg = sample(lab, hp["rpn_batch_size"], hp["rpn_positive_fraction"])
    gt = tf.gather(boxes, tf.maximum(matched, 0))
    box_loss = smooth_l1_sum(tf.gather(deltas, pos), encode(tf.gather(gt, pos), tf.gather(anchors, pos), RPN_WEIGHTS))
    both = tf.concat([pos, neg], 0)
    return box_loss, tf.gather(logits, both), tf.cast(tf.gather(lab, both), tf.float32)


def roi_sample(boxes: tf.Tensor, labels: tf.Tensor, props: tf.Tensor, hp: dict[str, Any]
               ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """One image's RoI sampling: proposals matched at roi_fg_iou / roi_bg_iou, roi_batch_size drawn; each
    proposal's class (0 background, -1 in between) and ground-truth index, the positives and negatives drawn."""
    matched = match(box_iou(boxes, props), hp["roi_fg_iou"], hp["roi_bg_iou"], False)
    gt_index = tf.maximum(matched, 0)
    cls = tf.where(matched == -1, tf.zeros_like(matched, tf.int64),
                   tf.where(matched == -2, -tf.ones_like(matched, tf.int64), tf.gather(labels, gt_index)))
    pos, neg = sample(cls, hp["roi_batch_size"], hp["roi_positive_fraction"])
    return cls, gt_index, pos, neg


def detection_losses(rpn_box: list[tf.Tensor], obj_logits: list[tf.Tensor], obj_labels: list[tf.Tensor],
                     roi_logits: tf.Tensor, box_regression: tf.Tensor, roi_labels: list[tf.Tensor],
                     roi_targets: list[tf.Tensor], num_classes: int) -> dict[str, tf.Tensor]:
    """The RPN's and the detector's losses over every image's draws: objectness cross-entropy, the RPN's
    box smooth L1 over the anchors drawn, classification cross-entropy, and the positive RoIs' smooth L1
    (their own class's deltas) over the RoIs drawn."""
    roi_labels, roi_targets = tf.concat(roi_labels, 0), tf.concat(roi_targets, 0)
    fg = tf.where(roi_labels > 0)[:, 0]
    per_class = tf.reshape(box_regression, (-1, num_classes, 4))
    picked = tf.gather_nd(per_class, tf.stack([fg, tf.gather(roi_labels, fg)], axis=1))
    obj_logits, obj_labels = tf.concat(obj_logits, 0), tf.concat(obj_labels, 0)
    return {
        "loss_objectness": tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(obj_labels, obj_logits)),
        "loss_rpn_box_reg": tf.add_n(rpn_box) / tf.cast(tf.size(obj_labels), tf.float32),
        "loss_classifier": tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(roi_labels, roi_logits)),
        "loss_box_reg": smooth_l1_sum(picked, tf.gather(roi_targets, fg)) / tf.cast(tf.size(roi_labels), tf.float32),
    }


def roi_align(features: tf.Tensor, rois: tf.Tensor, size: int, scale: float) -> tf.Tensor:
    """torchvision's roi_align (aligned=False, sampling_ratio=2) on one image's (1, H, W, C) features:
    crop_and_resize samples the 2size x 2size grid of bin sub-points, a 2x2 average pools them."""
    if features.dtype == tf.bfloat16:  # mixed_bfloat16: crop_and_resize reads float16 and float32 only
        features = tf.cast(features, tf.float32)
    h, w = tf.cast(tf.shape(features)[1], tf.float32), tf.cast(tf.shape(features)[2], tf.float32)
    x1, y1, x2, y2 = tf.unstack(rois * scale, axis=1)
    step_w, step_h = tf.maximum(x2 - x1, 1.0) / (2 * size), tf.maximum(y2 - y1, 1.0) / (2 * size)
    boxes = tf.stack([(y1 + 0.5 * step_h) / (h - 1), (x1 + 0.5 * step_w) / (w - 1),
                      (y1 + (2 * size - 0.5) * step_h) / (h - 1), (x1 + (2 * size - 0.5) * step_w) / (w - 1)], axis=1)
    crops = tf.image.crop_and_resize(features, boxes, tf.zeros(tf.shape(rois)[0], tf.int32), (2 * size, 2 * size))
    return tf.nn.avg_pool2d(crops, 2, 2, "VALID")


# --------------------------------------------------------------------------------------------
# The network


def anchors_for(grid: tuple[tf.Tensor, tf.Tensor], stride: tuple[tf.Tensor, tf.Tensor], hp: dict[str, Any]) -> tf.Tensor:
    """AnchorGenerator: (H x W x A, 4) anchors, position-major, each ratio's sizes in turn."""
    scales = np.asarray(hp["anchor_sizes"], np.float32)
    h_ratios = np.sqrt(np.asarray(hp["anchor_ratios"], np.float32))
    ws, hs = ((1 / h_ratios)[:, None] * scales[None, :]).ravel(), (h_ratios[:, None] * scales[None, :]).ravel()
    base = tf.constant(np.round(np.stack([-ws, -hs, ws, hs], axis=1) / 2), tf.float32)
    sx = tf.cast(tf.range(grid[1]) * stride[1], tf.float32)
    sy = tf.cast(tf.range(grid[0]) * stride[0], tf.float32)
    yy, xx = tf.meshgrid(sy, sx, indexing="ij")
    shifts = tf.stack([tf.reshape(xx, [-1]), tf.reshape(yy, [-1])] * 2, axis=1)
    return tf.reshape(shifts[:, None, :] + base[None], (-1, 4))


class FasterRCNN(keras.Model):
    """The trunk (conv1-conv4), the RPN head and the per-RoI head (conv5, average pooling, predictor)."""

    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="faster_rcnn")
        self.hp = hp
        depth = hp["backbone"]
        conv2_5 = stages(depth)
        self.trunk = [*stem(), *conv2_5[0], *conv2_5[1], *conv2_5[2]]
        self.head = conv2_5[3]
        channels, anchors = width(depth, 2), len(hp["anchor_sizes"]) * len(hp["anchor_ratios"])
        # an initializer per weight: a Keras 3 initializer gives every weight it initialises the same draw
        def rpn_init() -> dict[str, Any]:
            return dict(kernel_initializer=keras.initializers.RandomNormal(stddev=0.01), bias_initializer="zeros")

        self.rpn_conv = keras.layers.Conv2D(channels, 3, padding="same", activation="relu", **rpn_init())
        self.rpn_cls = keras.layers.Conv2D(anchors, 1, **rpn_init())
        self.rpn_box = keras.layers.Conv2D(anchors * 4, 1, **rpn_init())
        head_width = width(depth, 3)
        bound = 1 / math.sqrt(head_width)  # nn.Linear's default init

        def init() -> dict[str, Any]:
            return dict(kernel_initializer=keras.initializers.RandomUniform(-bound, bound),
                        bias_initializer=keras.initializers.RandomUniform(-bound, bound))

        self.cls_score = keras.layers.Dense(hp["num_classes"], **init())
        self.bbox_pred = keras.layers.Dense(hp["num_classes"] * 4, **init())
        self.mean = tf.constant(hp["pixel_mean"], tf.float32)
        self.std = tf.constant(hp["pixel_std"], tf.float32)
        self.rpn(self.features(tf.zeros((1, 64, 64, 3)), False))  # creates the weights
        self.roi_head(tf.zeros((1, hp["roi_output_size"], hp["roi_output_size"], channels)), False)

    # ---- GeneralizedRCNNTransform
    def transform(self, images: list[tf.Tensor], boxes: list[tf.Tensor]) -> tuple[tf.Tensor, list[tf.Tensor], list[tuple[Any, Any]]]:
        """Normalise, resize (short side min_size, long side at most max_size, bilinear), scale the
        boxes, pad to a multiple of 32: (N, H, W, 3), the boxes and each image's resized size."""
        resized, scaled, sizes = [], [], []
        for image, box in zip(images, boxes):
            shape = tf.cast(tf.shape(image)[:2], tf.float32)
            scale = tf.minimum(self.hp["min_size"] / tf.reduce_min(shape), self.hp["max_size"] / tf.reduce_max(shape))
            size = tf.cast(tf.floor(shape * scale), tf.int32)
            resized.append(tf.image.resize((image - self.mean) / self.std, size))
            ratio = tf.cast(size, tf.float32) / shape
            scaled.append(box * tf.stack([ratio[1], ratio[0], ratio[1], ratio[0]]))
            sizes.append((tf.cast(size[0], tf.float32), tf.cast(size[1], tf.float32)))
        top = tf.reduce_max(tf.stack([tf.shape(x)[:2] for x in resized]), axis=0)
        top = (top + SIZE_DIVISIBLE - 1) // SIZE_DIVISIBLE * SIZE_DIVISIBLE
        batch = tf.stack([tf.pad(x, [[0, top[0] - tf.shape(x)[0]], [0, top[1] - tf.shape(x)[1]], [0, 0]])
                          for x in resized])
        return batch, scaled, sizes

    def features(self, images: tf.Tensor, training: bool) -> tf.Tensor:
        return run(self.trunk, images, training)

    def rpn(self, feats: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """RPNHead: a 3x3 convolution with ReLU, then objectness logits and box deltas per anchor."""
        t = self.rpn_conv(feats)  # the losses and box coding run in float32 under mixed precision
        return tf.cast(self.rpn_cls(t), tf.float32), tf.cast(self.rpn_box(t), tf.float32)

    def roi_head(self, pooled: tf.Tensor, training: bool) -> tuple[tf.Tensor, tf.Tensor]:
        x = tf.reduce_mean(run(self.head, pooled, training), axis=[1, 2])
        return tf.cast(self.cls_score(x), tf.float32), tf.cast(self.bbox_pred(x), tf.float32)

    def call(self, images: tf.Tensor, training: bool = False) -> tf.Tensor:  # keras needs one; losses() is the model
        return self.features(images, training)

    # ---- the training forward: the four losses
    def losses_of(self, images: list[tf.Tensor], boxes: list[tf.Tensor], labels: list[tf.Tensor],
                  training: bool = True) -> dict[str, tf.Tensor]:
        hp = self.hp
        batch, boxes, sizes = self.transform(images, boxes)
        feats = self.features(batch, training)
        logits, deltas = self.rpn(feats)
        n = tf.shape(feats)[0]
        logits, deltas = tf.reshape(logits, (n, -1)), tf.reshape(deltas, (n, -1, 4))
        grid, padded = tf.shape(feats)[1:3], tf.shape(batch)[1:3]
        anchors = anchors_for((grid[0], grid[1]), (padded[0] // grid[0], padded[1] // grid[1]), hp)
        scale = 2.0 ** tf.round(tf.math.log(tf.cast(grid[0], tf.float32) / tf.cast(padded[0], tf.float32)) / math.log(2.0))
        rpn_box, obj_logits, obj_labels = [], [], []
        pooled, roi_labels, roi_targets = [], [], []
        for i in range(len(images)):
            # RPN targets and losses
            box_loss, obj_logit, obj_label = rpn_sample(boxes[i], anchors, logits[i], deltas[i], hp)
            rpn_box.append(box_loss)
            obj_logits.append(obj_logit)
            obj_labels.append(obj_label)
            # proposals: top pre-NMS objectness, decoded, clipped, small ones out, NMS, top post-NMS
            k = tf.minimum(hp["rpn_pre_nms_top_n"], tf.shape(logits[i])[0])
            top_scores, top = tf.math.top_k(tf.stop_gradient(logits[i]), k)
            props = decode(tf.gather(tf.stop_gradient(deltas[i]), top), tf.gather(anchors, top), RPN_WEIGHTS)
            h, w = sizes[i]
            props = tf.stack([tf.clip_by_value(props[:, 0], 0.0, w), tf.clip_by_value(props[:, 1], 0.0, h),
                              tf.clip_by_value(props[:, 2], 0.0, w), tf.clip_by_value(props[:, 3], 0.0, h)], axis=1)
            big = tf.where((props[:, 2] - props[:, 0] >= 1e-3) & (props[:, 3] - props[:, 1] >= 1e-3))[:, 0]
            props, top_scores = tf.gather(props, big), tf.gather(top_scores, big)
            keep = tf.image.non_max_suppression(props, tf.sigmoid(top_scores), hp["rpn_post_nms_top_n"],
                                                hp["rpn_nms_threshold"])
            props = tf.concat([tf.gather(props, keep), boxes[i]], 0)  # the ground truth joins the proposals
            # RoI sampling and targets
            cls, gt_index, pos, neg = roi_sample(boxes[i], labels[i], props, hp)
            chosen = tf.concat([pos, neg], 0)
            rois, cls = tf.gather(props, chosen), tf.gather(cls, chosen)
            targets = encode(tf.gather(boxes[i], tf.gather(gt_index, chosen)), rois, ROI_WEIGHTS)
            pooled.append(roi_align(feats[i:i + 1], rois, hp["roi_output_size"], scale))
            roi_targets.append(targets)
            roi_labels.append(cls)
        # the head runs once on every image's RoIs, as torchvision's (one batch for conv5's batch norm)
        roi_logits, box_regression = self.roi_head(tf.concat(pooled, 0), training)
        return detection_losses(rpn_box, obj_logits, obj_labels, roi_logits, box_regression, roi_labels, roi_targets,
                                hp["num_classes"])


@dataclass
class Training:
    model: FasterRCNN
    optimizer: keras.optimizers.Optimizer
    decay: float


def build(hp: dict[str, Any], precision: Any) -> Training:
    model = FasterRCNN(hp)
    optimizer = precision.wrap_optimizer(keras.optimizers.SGD(learning_rate=hp["learning_rate"], momentum=hp["momentum"]))
    return Training(model, built(optimizer, model.trainable_variables), hp["weight_decay"])


def to_device(batch: Any, device: str) -> dict[str, Any]:
    """Images as a list of (H, W, 3) tensors, boxes and labels as lists of tensors."""
    with tf.device(device):
        return {"images": [tf.constant(np.ascontiguousarray(x.transpose(1, 2, 0))) for x in batch.images],
                "boxes": [tf.constant(t["boxes"]) for t in batch.targets],
                "labels": [tf.constant(t["labels"]) for t in batch.targets]}


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The training-mode forward (sampled RoIs, so that the head runs on roi_batch_size RoIs per image):
    the four losses as NumPy, run eagerly."""
    losses = training.model.losses_of(inputs["images"], inputs["boxes"], inputs["labels"])
    return {k: v.numpy() for k, v in losses.items()}


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> tf.Tensor:
    """One SGD step on the sum of the RPN and detector losses (weight decay coupled, as PyTorch's SGD)."""
    model, variables = training.model, training.model.trainable_variables
    with tf.GradientTape() as tape:
        loss = tf.add_n(list(model.losses_of(inputs["images"], inputs["boxes"], inputs["labels"]).values()))
        regularized = loss + l2_penalty(variables, training.decay) if training.decay else loss
    scaled_update(tape, regularized, training.optimizer, variables)
    return loss
