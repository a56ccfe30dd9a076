"""Mask R-CNN on TensorFlow 2 / Keras 3: torchvision's maskrcnn_resnet50_fpn(weights=None,
weights_backbone=None) rebuilt from TF ops, SGD with momentum and coupled weight decay, one training step.

The same network and algorithm as pytorch.py: a ResNet-50 (workloads/_shared/keras_resnet.py; trainable
batch norm in every layer, all five stages trained, as torchvision without pretrained weights), the FPN
(1x1 lateral and 3x3 output convolutions of 256 channels, nearest top-down upsampling, P6 = P5 sub-sampled
by 2 for the RPN only: LastLevelMaxPool), the RPN head shared by P2-P6 with one anchor size per level and
three ratios, proposals per level (top pre_nms_top_n, decoded, clipped, small ones out, NMS per level,
top post_nms_top_n overall: batched_nms), the detector's RoI sampling with the ground truth added,
MultiScaleRoIAlign over P2-P5 (LevelMapper k0 = 4, canonical size 224; 7x7 for boxes, 14x14 for masks,
sampling ratio 2, aligned False), TwoMLPHead (1024, 1024) and FastRCNNPredictor, MaskRCNNHeads (four 3x3
convolutions of 256) and MaskRCNNPredictor (2x2 transposed convolution, stride 2, then 1x1 per class), and
the five losses: the RPN's and the detector's as faster_rcnn/tensorflow.py (whose box coding, anchors, RPN
and RoI sampling and those four losses this file uses), the mask loss as maskrcnn_loss (28x28 targets:
each positive's ground-truth mask, resized with the image by nearest neighbour, RoI-aligned on its box with
torchvision's adaptive sampling grid; binary cross-entropy of the logits of the box's class). RoI align here
reproduces torchvision's bilinear sampling exactly, border included: tf.image.crop_and_resize on the map padded
by one edge row and column, on the grid of sample points, averaged per bin. Every size and rate comes from the
hyperparameters handed in (workload.toml) or is one of torchvision's fixed constants below; nothing here
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
from _shared.keras_resnet import conv_init, run, stages, stem
from _shared.sibling import load
from _shared.tf_amp import built, scaled_update

_det = load("faster_rcnn", "tensorflow")  # box coding, anchors, the RPN's and RoI sampling, the four losses
encode, decode, RPN_WEIGHTS, ROI_WEIGHTS = _det.encode, _det.decode, _det.RPN_WEIGHTS, _det.ROI_WEIGHTS

# torchvision's constants (maskrcnn_resnet50_fpn, FeaturePyramidNetwork, TwoMLPHead, MaskRCNNHeads,
# MultiScaleRoIAlign, LevelMapper, RegionProposalNetwork, GeneralizedRCNNTransform)
FPN_CHANNELS = 256
BOX_HEAD_WIDTH = 1024
MASK_HEAD_LAYERS = (256, 256, 256, 256)
BOX_POOL, MASK_POOL, SAMPLING_RATIO = 7, 14, 2
MASK_SIZE = 2 * MASK_POOL  # the 2x2 stride-2 transposed convolution doubles the 14x14 RoI features
CANONICAL_SIZE, CANONICAL_LEVEL, LEVELS = 224, 4, (2, 5)  # RoIs go to P2-P5
MIN_PROPOSAL_SIZE = 1e-3
SIZE_DIVISIBLE = 32


# --------------------------------------------------------------------------------------------
# Sampling, as torchvision.ops.roi_align and F.interpolate(mode="nearest")


def roi_align(features: tf.Tensor, rois: tf.Tensor, image_index: tf.Tensor, size: int, scale: float,
              grid: tuple[int, int]) -> tf.Tensor:
    """torchvision's roi_align (aligned=False) of `rois` (x1, y1, x2, y2, in image pixels) on (N, H, W, C)
    `features`: a size x size output, each bin the mean of grid[0] x grid[1] bilinear samples. The map is
    padded by its own edge so that crop_and_resize reads as torchvision does: points within one pixel
    outside the map take the edge value, points further out read 0."""
    if features.dtype == tf.bfloat16:  # mixed_bfloat16: crop_and_resize reads float16 and float32 only
        features = tf.cast(features, tf.float32)
    h, w = tf.shape(features)[1], tf.shape(features)[2]
    padded = tf.pad(features, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="SYMMETRIC")
    x1, y1, x2, y2 = tf.unstack(rois * scale, axis=1)
    gh, gw = grid
    step_h, step_w = tf.maximum(y2 - y1, 1.0) / (size * gh), tf.maximum(x2 - x1, 1.0) / (size * gw)
    # first and last sample points, shifted by the padding, normalized as crop_and_resize's boxes
    top, left = y1 + 0.5 * step_h + 1.0, x1 + 0.5 * step_w + 1.0
    bottom, right = y1 + (size * gh - 0.5) * step_h + 1.0, x1 + (size * gw - 0.5) * step_w + 1.0
    hn, wn = tf.cast(h + 1, tf.float32), tf.cast(w + 1, tf.float32)  # padded size - 1
    boxes = tf.stack([top / hn, left / wn, bottom / hn, right / wn], axis=1)
    crops = tf.image.crop_and_resize(padded, boxes, image_index, (size * gh, size * gw))
    return tf.nn.avg_pool2d(crops, (gh, gw), (gh, gw), "VALID")


def nearest(x: tf.Tensor, size: tuple[int, int], axes: tuple[int, int] = (1, 2)) -> tf.Tensor:
    """F.interpolate(mode="nearest") to `size` along `axes`: source index floor(i x in / out)."""
    for axis, out in zip(axes, size):
        n = x.shape[axis]
        index = np.minimum(np.floor(np.arange(out, dtype=np.float32) * np.float32(n / out)).astype(np.int32), n - 1)
        x = tf.gather(x, index, axis=axis)
    return x


# --------------------------------------------------------------------------------------------
# The network


def _dense(units: int, fan_in: int, **kwargs: Any) -> keras.layers.Dense:
    """nn.Linear with its default initialization (weight and bias uniform in +-1/sqrt(fan_in))."""
    bound = 1 / math.sqrt(fan_in)
    return keras.layers.Dense(units, kernel_initializer=keras.initializers.RandomUniform(-bound, bound),
                              bias_initializer=keras.initializers.RandomUniform(-bound, bound), **kwargs)


class MaskRCNN(keras.Model):
    """ResNet-50 + FPN, the RPN head, the box head and predictor, the mask head and predictor."""

    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="mask_rcnn")
        self.hp = hp
        self.stem = stem()
        self.stages = stages("resnet50")
        # an initializer per weight: a Keras 3 initializer gives every weight it initialises the same draw
        def fpn_init() -> dict[str, Any]:  # kaiming_uniform_(a=1)
            return dict(kernel_initializer=keras.initializers.VarianceScaling(1.0, "fan_in", "uniform"),
                        bias_initializer="zeros")

        def rpn_init() -> dict[str, Any]:
            return dict(kernel_initializer=keras.initializers.RandomNormal(stddev=0.01), bias_initializer="zeros")

        self.fpn_inner = [keras.layers.Conv2D(FPN_CHANNELS, 1, **fpn_init()) for _ in range(4)]
        self.fpn_layer = [keras.layers.Conv2D(FPN_CHANNELS, 3, padding="same", **fpn_init()) for _ in range(4)]
        anchors = len(hp["anchor_ratios"])  # one size per level
        self.rpn_conv = keras.layers.Conv2D(FPN_CHANNELS, 3, padding="same", activation="relu", **rpn_init())
        self.rpn_cls = keras.layers.Conv2D(anchors, 1, **rpn_init())
        self.rpn_box = keras.layers.Conv2D(anchors * 4, 1, **rpn_init())
        flat = FPN_CHANNELS * BOX_POOL * BOX_POOL
        self.fc6 = _dense(BOX_HEAD_WIDTH, flat, activation="relu")
        self.fc7 = _dense(BOX_HEAD_WIDTH, BOX_HEAD_WIDTH, activation="relu")
        self.cls_score = _dense(hp["num_classes"], BOX_HEAD_WIDTH)
        self.bbox_pred = _dense(hp["num_classes"] * 4, BOX_HEAD_WIDTH)
        self.mask_convs = [keras.layers.Conv2D(c, 3, padding="same", activation="relu", kernel_initializer=conv_init(),
                                               bias_initializer="zeros") for c in MASK_HEAD_LAYERS]
        self.mask_upsample = keras.layers.Conv2DTranspose(MASK_HEAD_LAYERS[-1], 2, 2, activation="relu",
                                                          kernel_initializer=conv_init(), bias_initializer="zeros")
        self.mask_logits = keras.layers.Conv2D(hp["num_classes"], 1, kernel_initializer=conv_init(),
                                               bias_initializer="zeros")
        self.mean = tf.constant(hp["pixel_mean"], tf.float32)
        self.std = tf.constant(hp["pixel_std"], tf.float32)
        self.rpn(self.features(tf.zeros((1, 64, 64, 3)), False))  # creates the weights
        self.box_head(tf.zeros((1, BOX_POOL, BOX_POOL, FPN_CHANNELS)))
        self.mask_head(tf.zeros((1, MASK_POOL, MASK_POOL, FPN_CHANNELS)))

    # ---- GeneralizedRCNNTransform
    def transform(self, images: list[tf.Tensor], boxes: list[tf.Tensor], masks: list[tf.Tensor]
                  ) -> tuple[tf.Tensor, list[tf.Tensor], list[tf.Tensor], list[tuple[int, int]]]:
        """Normalise, resize (short side min_size, long side at most max_size: bilinear for the image,
        nearest for the masks), scale the boxes, pad to a multiple of 32: (N, H, W, 3), the boxes, the
        masks (K, H, W) and each image's resized size."""
        resized, scaled, fitted, sizes = [], [], [], []
        for image, box, mask in zip(images, boxes, masks):
            h, w = int(image.shape[0]), int(image.shape[1])
            scale = min(self.hp["min_size"] / min(h, w), self.hp["max_size"] / max(h, w))
            size = (math.floor(h * scale), math.floor(w * scale))
            resized.append(tf.image.resize((image - self.mean) / self.std, size))
            ratio_h, ratio_w = np.float32(size[0]) / np.float32(h), np.float32(size[1]) / np.float32(w)
            scaled.append(box * tf.constant([ratio_w, ratio_h, ratio_w, ratio_h]))
            fitted.append(tf.cast(nearest(mask, size), tf.float32))
            sizes.append(size)
        top = [-(-max(s[i] for s in sizes) // SIZE_DIVISIBLE) * SIZE_DIVISIBLE for i in (0, 1)]
        batch = tf.stack([tf.pad(x, [[0, top[0] - s[0]], [0, top[1] - s[1]], [0, 0]]) for x, s in zip(resized, sizes)])
        return batch, scaled, fitted, sizes

    def features(self, images: tf.Tensor, training: bool) -> list[tf.Tensor]:
        """P2-P6: the FPN over conv2-conv5 (the coarsest level first, as FeaturePyramidNetwork), P6 = P5
        at stride 2 (LastLevelMaxPool: max-pool with kernel 1)."""
        x, trunk = run(self.stem, images, training), []
        for stage in self.stages:
            x = run(stage, x, training)
            trunk.append(x)
        inner = self.fpn_inner[3](trunk[3])
        pyramid = [self.fpn_layer[3](inner)]
        for i in (2, 1, 0):
            lateral = self.fpn_inner[i](trunk[i])
            inner = lateral + nearest(inner, (lateral.shape[1], lateral.shape[2]))
            pyramid.insert(0, self.fpn_layer[i](inner))
        return [*pyramid, pyramid[-1][:, ::2, ::2]]

    def rpn(self, feats: list[tf.Tensor]) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """RPNHead on each level: a 3x3 convolution with ReLU, then objectness logits and box deltas."""
        out = []
        for f in feats:
            t = self.rpn_conv(f)
            out.append((tf.cast(self.rpn_cls(t), tf.float32), tf.cast(self.rpn_box(t), tf.float32)))
        return out

    def box_head(self, pooled: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """TwoMLPHead on the RoIs flattened channel-first (as torch.flatten of (R, C, 7, 7)), the predictor."""
        x = tf.reshape(tf.transpose(pooled, (0, 3, 1, 2)), (tf.shape(pooled)[0], -1))
        x = self.fc7(self.fc6(x))
        return tf.cast(self.cls_score(x), tf.float32), tf.cast(self.bbox_pred(x), tf.float32)

    def mask_head(self, pooled: tf.Tensor) -> tf.Tensor:
        """MaskRCNNHeads and MaskRCNNPredictor: (R, 28, 28, num_classes) logits."""
        x = pooled
        for layer in self.mask_convs:
            x = layer(x)
        return tf.cast(self.mask_logits(self.mask_upsample(x)), tf.float32)

    def call(self, images: tf.Tensor, training: bool = False) -> list[tf.Tensor]:  # keras needs one; losses_of is the model
        return self.features(images, training)

    def pool(self, feats: list[tf.Tensor], rois: list[tf.Tensor], sizes: list[tuple[int, int]], size: int) -> tf.Tensor:
        """MultiScaleRoIAlign over P2-P5: each RoI on the level floor(4 + log2(sqrt(area) / 224)), clamped
        to 2-5; the levels' scales 2^round(log2(map height / the largest resized image height))."""
        boxes = tf.concat(rois, 0)
        owner = tf.concat([tf.fill([tf.shape(r)[0]], i) for i, r in enumerate(rois)], 0)
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        level = tf.floor(CANONICAL_LEVEL + tf.math.log(tf.sqrt(area) / CANONICAL_SIZE) / math.log(2.0) + 1e-6)
        level = tf.cast(tf.clip_by_value(level, *LEVELS), tf.int32) - LEVELS[0]
        top = max(s[0] for s in sizes)
        pieces, order = [], []
        for k, f in enumerate(feats[:LEVELS[1] - LEVELS[0] + 1]):
            scale = 2.0 ** round(math.log2(f.shape[1] / top))
            at = tf.where(level == k)[:, 0]
            pieces.append(roi_align(f, tf.gather(boxes, at), tf.gather(owner, at), size, scale,
                                    (SAMPLING_RATIO, SAMPLING_RATIO)))
            order.append(at)
        return tf.gather(tf.concat(pieces, 0), tf.math.invert_permutation(tf.cast(tf.concat(order, 0), tf.int32)))

    def proposals(self, objectness: list[tf.Tensor], deltas: list[tf.Tensor], anchors: list[tf.Tensor],
                  size: tuple[int, int]) -> tf.Tensor:
        """One image's proposals, as RegionProposalNetwork.filter_proposals: per level the top
        pre_nms_top_n objectness, decoded, clipped to the image, boxes under 1e-3 out, NMS per level
        (batched_nms), the post_nms_top_n best overall."""
        hp = self.hp
        boxes, scores, levels = [], [], []
        for k, (logit, delta, anchor) in enumerate(zip(objectness, deltas, anchors)):
            top_scores, top = tf.math.top_k(tf.stop_gradient(logit), min(hp["rpn_pre_nms_top_n"], int(logit.shape[0])))
            boxes.append(decode(tf.gather(tf.stop_gradient(delta), top), tf.gather(anchor, top), RPN_WEIGHTS))
            scores.append(top_scores)
            levels.append(tf.fill(tf.shape(top), float(k)))
        props, score, lvl = tf.concat(boxes, 0), tf.sigmoid(tf.concat(scores, 0)), tf.concat(levels, 0)
        h, w = float(size[0]), float(size[1])
        props = tf.stack([tf.clip_by_value(props[:, 0], 0.0, w), tf.clip_by_value(props[:, 1], 0.0, h),
                          tf.clip_by_value(props[:, 2], 0.0, w), tf.clip_by_value(props[:, 3], 0.0, h)], axis=1)
        big = tf.where((props[:, 2] - props[:, 0] >= MIN_PROPOSAL_SIZE) & (props[:, 3] - props[:, 1] >= MIN_PROPOSAL_SIZE))[:, 0]
        props, score, lvl = tf.gather(props, big), tf.gather(score, big), tf.gather(lvl, big)
        # batched_nms: the levels moved apart so that boxes of different levels never overlap
        apart = props + (lvl * (tf.reduce_max(props) + 1.0))[:, None]
        keep = tf.image.non_max_suppression(apart, score, hp["rpn_post_nms_top_n"], hp["rpn_nms_threshold"])
        return tf.gather(props, keep)

    # ---- the training forward: the five losses
    def losses_of(self, images: list[tf.Tensor], boxes: list[tf.Tensor], labels: list[tf.Tensor],
                  masks: list[tf.Tensor], training: bool = True, rpn_out: dict[str, Any] | None = None
                  ) -> dict[str, tf.Tensor]:
        hp = self.hp
        batch, boxes, masks, sizes = self.transform(images, boxes, masks)
        feats = self.features(batch, training)
        head = self.rpn(feats)
        if rpn_out is not None:
            rpn_out["objectness"], rpn_out["deltas"] = head[0]
        n, padded = len(images), batch.shape[1:3]
        level_anchors, level_logits, level_deltas = [], [], []
        for f, (logit, delta), size in zip(feats, head, hp["anchor_sizes"]):
            grid = (f.shape[1], f.shape[2])
            stride = (padded[0] // grid[0], padded[1] // grid[1])
            level_anchors.append(_det.anchors_for(grid, stride, {"anchor_sizes": [size], "anchor_ratios": hp["anchor_ratios"]}))
            level_logits.append(tf.reshape(logit, (n, -1)))
            level_deltas.append(tf.reshape(delta, (n, -1, 4)))
        anchors, logits, deltas = tf.concat(level_anchors, 0), tf.concat(level_logits, 1), tf.concat(level_deltas, 1)
        rpn_box, obj_logits, obj_labels = [], [], []
        rois, roi_labels, roi_targets, positives, positive_labels, mask_targets = [], [], [], [], [], []
        for i in range(n):
            # RPN targets and losses, over the anchors of every level
            box_loss, obj_logit, obj_label = _det.rpn_sample(boxes[i], anchors, logits[i], deltas[i], hp)
            rpn_box.append(box_loss)
            obj_logits.append(obj_logit)
            obj_labels.append(obj_label)
            # proposals, with the ground truth added; RoI sampling and targets
            props = tf.concat([self.proposals([x[i] for x in level_logits], [x[i] for x in level_deltas],
                                              level_anchors, sizes[i]), boxes[i]], 0)
            cls, gt_index, pos, neg = _det.roi_sample(boxes[i], labels[i], props, hp)
            chosen = tf.concat([pos, neg], 0)
            rois.append(tf.gather(props, chosen))
            roi_labels.append(tf.gather(cls, chosen))
            roi_targets.append(encode(tf.gather(boxes[i], tf.gather(gt_index, chosen)), rois[-1], ROI_WEIGHTS))
            # the mask branch: the positives, their ground-truth masks projected on their boxes
            positives.append(tf.gather(props, pos))
            positive_labels.append(tf.gather(cls, pos))
            mask_targets.append(self.mask_targets(masks[i], positives[-1], tf.gather(gt_index, pos)))
        # the heads run once on every image's RoIs, as torchvision's
        roi_logits, box_regression = self.box_head(self.pool(feats, rois, sizes, BOX_POOL))
        mask_logits = self.mask_head(self.pool(feats, positives, sizes, MASK_POOL))
        positive_labels, mask_target = tf.concat(positive_labels, 0), tf.concat(mask_targets, 0)
        chosen_logits = tf.gather(tf.transpose(mask_logits, (0, 3, 1, 2)), positive_labels, axis=1, batch_dims=1)
        return _det.detection_losses(rpn_box, obj_logits, obj_labels, roi_logits, box_regression, roi_labels,
                                     roi_targets, hp["num_classes"]) | {
            "loss_mask": (tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(mask_target, chosen_logits))
                          if mask_target.shape[0] else tf.reduce_sum(mask_logits) * 0.0)}

    @staticmethod
    def mask_targets(masks: tf.Tensor, rois: tf.Tensor, gt_index: tf.Tensor) -> tf.Tensor:
        """project_masks_on_boxes: each RoI's matched (H, W) mask RoI-aligned to 28x28 on the RoI (scale 1,
        aligned False, torchvision's adaptive grid of ceil(RoI side / 28) samples per bin and side)."""
        found = tf.gather(masks, gt_index)[..., None]
        sides = tf.maximum(rois[:, 2:] - rois[:, :2], 1.0).numpy()
        out = [roi_align(found[k:k + 1], rois[k:k + 1], tf.zeros([1], tf.int32), MASK_SIZE, 1.0,
                         (math.ceil(sides[k, 1] / MASK_SIZE), math.ceil(sides[k, 0] / MASK_SIZE)))
               for k in range(int(rois.shape[0]))]
        return tf.concat(out, 0)[..., 0] if out else tf.zeros((0, MASK_SIZE, MASK_SIZE))


@dataclass
class Training:
    model: MaskRCNN
    optimizer: keras.optimizers.Optimizer
    decay: float


def build(hp: dict[str, Any], precision: Any) -> Training:
    model = MaskRCNN(hp)
    optimizer = precision.wrap_optimizer(keras.optimizers.SGD(learning_rate=hp["learning_rate"], momentum=hp["momentum"]))
    return Training(model, built(optimizer, model.trainable_variables), hp["weight_decay"])


def to_device(batch: Any, device: str) -> dict[str, Any]:
    """Faster R-CNN's inputs (images, boxes, labels) and the (K, H, W) uint8 masks as a list of tensors."""
    with tf.device(device):
        return _det.to_device(batch, device) | {"masks": [tf.constant(t["masks"]) for t in batch.targets]}


def _losses(training: Training, inputs: dict[str, Any], rpn_out: dict[str, Any] | None = None) -> dict[str, tf.Tensor]:
    return training.model.losses_of(inputs["images"], inputs["boxes"], inputs["labels"], inputs["masks"],
                                    rpn_out=rpn_out)


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The training-mode forward (sampled RoIs: the box head runs on roi_batch_size RoIs per image, the
    mask head on their positives), run eagerly: the five losses and, as pytorch.py's, the RPN head's
    outputs on P2 (channels first, (N, A, H, W) and (N, 4A, H, W)), which do not depend on sampling."""
    rpn: dict[str, Any] = {}
    losses = _losses(training, inputs, rpn)
    return {k: v.numpy() for k, v in losses.items()} | {
        "rpn_objectness": np.transpose(rpn["objectness"].numpy(), (0, 3, 1, 2)),
        "rpn_deltas": np.transpose(rpn["deltas"].numpy(), (0, 3, 1, 2))}


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> tf.Tensor:
    """One SGD step on the sum of the five losses (weight decay coupled, as PyTorch's SGD)."""
    variables = training.model.trainable_variables
    with tf.GradientTape() as tape:
        loss = tf.add_n([tf.cast(v, tf.float32) for v in _losses(training, inputs).values()])
        regularized = loss + l2_penalty(variables, training.decay) if training.decay else loss
    scaled_update(tape, regularized, training.optimizer, variables)
    return loss
