"""Mask R-CNN on MXNet 1.9 Gluon: torchvision's maskrcnn_resnet50_fpn(weights=None, weights_backbone=None)
written out in Gluon, SGD with momentum and coupled weight decay, one training step.

The same network and algorithm as pytorch.py and tensorflow.py: a ResNet-50 (workloads/_shared/gluon_resnet.py;
trainable batch norm in every layer, all five stages trained, as torchvision without pretrained weights), the
FPN (1x1 lateral and 3x3 output convolutions of 256 channels, nearest top-down upsampling, P6 = P5 sub-sampled
by 2 for the RPN only: LastLevelMaxPool), the RPN head shared by P2-P6 with one anchor size per level and three
ratios, proposals per level (top pre_nms_top_n, decoded, clipped, small ones out, NMS per level, top
post_nms_top_n overall: batched_nms), the detector's RoI sampling with the ground truth added,
MultiScaleRoIAlign over P2-P5 (LevelMapper k0 = 4, canonical size 224; 7x7 for boxes, 14x14 for masks,
sampling ratio 2, aligned False), TwoMLPHead (1024, 1024) and FastRCNNPredictor, MaskRCNNHeads (four 3x3
convolutions of 256) and MaskRCNNPredictor (2x2 transposed convolution, stride 2, then 1x1 per class), and the
five losses: the RPN's and the detector's as faster_rcnn/mxnet.py (whose box coding, anchors, matcher,
sampler, RPN sampling and those four losses this file uses), the mask loss as maskrcnn_loss (28x28 targets:
each positive's ground-truth mask, resized with the image by nearest neighbour, RoI-aligned on its box with
torchvision's adaptive sampling grid; binary cross-entropy of the logits of the box's class). MXNet's
contrib.ROIAlign (aligned=False) is torchvision's roi_align kernel (both from Detectron's), its sample_ratio -1
the adaptive grid; contrib.box_nms with the level as class id is batched_nms. Matching and sampling are NumPy
on the host, as in faster_rcnn/mxnet.py. Every size and rate comes from the hyperparameters handed in
(workload.toml) or is one of torchvision's fixed constants below; nothing here times, logs or profiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from _shared import gluon_resnet as resnet
from _shared.sibling import load

_det = load("faster_rcnn", "mxnet")  # box IoU and coding, anchors, the matcher, the sampler, the losses
# Faster R-CNN's inputs (targets, masks included, stay NumPy on the host) and its step: one SGD step
# on the sum of the losses the model returns (here five)
to_device, train_step = _det.to_device, _det.train_step
box_iou, encode, decode, match, sample = _det.box_iou, _det.encode, _det.decode, _det.match, _det.sample
RPN_WEIGHTS, ROI_WEIGHTS, bce_with_logits = _det.RPN_WEIGHTS, _det.ROI_WEIGHTS, _det.bce_with_logits

# torchvision's constants (maskrcnn_resnet50_fpn, FeaturePyramidNetwork, TwoMLPHead, MaskRCNNHeads,
# MultiScaleRoIAlign, LevelMapper, RegionProposalNetwork, GeneralizedRCNNTransform)
FPN_CHANNELS = 256
BOX_HEAD_WIDTH = 1024
MASK_HEAD_LAYERS = (256, 256, 256, 256)
BOX_POOL, MASK_POOL, SAMPLING_RATIO = 7, 14, 2
MASK_SIZE = 2 * MASK_POOL  # the 2x2 stride-2 transposed convolution doubles the 14x14 RoI features
CANONICAL_SIZE, CANONICAL_LEVEL, LEVELS = 224, 4, (2, 5)  # RoIs go to P2-P5
LEVEL_EPS = 1e-6
MIN_PROPOSAL_SIZE = 1e-3
SIZE_DIVISIBLE = 32


# --------------------------------------------------------------------------------------------
# Host-side pieces: nearest resize, batched NMS, level mapping


def nearest_index(n: int, out: int) -> np.ndarray:
    """F.interpolate(mode="nearest")'s source indices for `out` outputs from `n`: floor(i x float32(n / out))."""
    return np.minimum(np.floor(np.arange(out, dtype=np.float32) * np.float32(n / out)).astype(np.int64), n - 1)


def batched_nms(boxes: np.ndarray, scores: np.ndarray, groups: np.ndarray, threshold: float) -> np.ndarray:
    """torchvision's batched_nms: greedy NMS within each group (level), indices by descending score
    (MXNet's contrib.box_nms with the group as class id, no suppression across ids)."""
    if len(boxes) == 0:
        return np.zeros(0, dtype=np.int64)
    rows = np.concatenate([np.arange(len(boxes), dtype=np.float32)[:, None], scores[:, None],
                           groups.astype(np.float32)[:, None], boxes], axis=1)
    out = mx.nd.contrib.box_nms(mx.nd.array(rows), overlap_thresh=threshold, valid_thresh=-1.0, coord_start=3,
                                score_index=1, id_index=2, force_suppress=False).asnumpy()
    return out[out[:, 1] >= 0, 0].astype(np.int64)


def roi_levels(boxes: np.ndarray) -> np.ndarray:
    """LevelMapper: floor(4 + log2(sqrt(area) / 224) + 1e-6) clamped to 2-5, as 0-based levels of P2-P5."""
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    with np.errstate(divide="ignore"):
        level = np.floor(CANONICAL_LEVEL + np.log2(np.sqrt(area) / np.float32(CANONICAL_SIZE)) + np.float32(LEVEL_EPS))
    return (np.clip(level, *LEVELS) - LEVELS[0]).astype(np.int64)


# --------------------------------------------------------------------------------------------
# The network


def _conv(channels: int, kernel: int, cin: int, init: Any = None, **kwargs: Any) -> gluon.nn.Conv2D:
    """A convolution with bias, padded by kernel // 2 (PyTorch's padding)."""
    return gluon.nn.Conv2D(channels, kernel, 1, kernel // 2, in_channels=cin, weight_initializer=init, **kwargs)


def _dense(units: int, fan_in: int, **kwargs: Any) -> gluon.nn.Dense:
    """nn.Linear with its default initialization (weight and bias uniform in +-1/sqrt(fan_in))."""
    init = mx.init.Uniform(1 / math.sqrt(fan_in))
    return gluon.nn.Dense(units, in_units=fan_in, weight_initializer=init, bias_initializer=init, **kwargs)


class MaskRCNN(gluon.Block):
    """ResNet-50 + FPN, the RPN head, the box head and predictor, the mask head and predictor."""

    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hp = hp
        anchors = len(hp["anchor_ratios"])  # one size per level
        fpn_init = mx.init.Xavier(rnd_type="uniform", factor_type="in", magnitude=3)  # kaiming_uniform_(a=1)
        rpn_init = mx.init.Normal(0.01)
        with self.name_scope():
            self.body = gluon.nn.HybridSequential(prefix="body_")  # the stem, then layer1-layer4
            with self.body.name_scope():
                stem = gluon.nn.HybridSequential(prefix="stem_")
                with stem.name_scope():
                    channels = resnet.add_stem(stem)
                self.body.add(stem)
                widths = []
                for stage in range(4):
                    layer = gluon.nn.HybridSequential(prefix=f"layer{stage + 1}_")
                    with layer.name_scope():
                        channels = resnet.add_stage(layer, "resnet50", stage, channels)
                    self.body.add(layer)
                    widths.append(channels)
            self.fpn_inner = gluon.nn.HybridSequential(prefix="fpn_inner_")
            self.fpn_layer = gluon.nn.HybridSequential(prefix="fpn_layer_")
            for width in widths:
                self.fpn_inner.add(_conv(FPN_CHANNELS, 1, width, fpn_init))
                self.fpn_layer.add(_conv(FPN_CHANNELS, 3, FPN_CHANNELS, fpn_init))
            self.rpn_conv = _conv(FPN_CHANNELS, 3, FPN_CHANNELS, rpn_init, activation="relu", prefix="rpn_conv_")
            self.rpn_cls = _conv(anchors, 1, FPN_CHANNELS, rpn_init, prefix="rpn_cls_")
            self.rpn_box = _conv(4 * anchors, 1, FPN_CHANNELS, rpn_init, prefix="rpn_box_")
            self.box_head = gluon.nn.HybridSequential(prefix="box_head_")
            with self.box_head.name_scope():  # flattens (R, C, 7, 7) channel-first, as torch.flatten
                self.box_head.add(_dense(BOX_HEAD_WIDTH, FPN_CHANNELS * BOX_POOL * BOX_POOL, activation="relu"),
                                  _dense(BOX_HEAD_WIDTH, BOX_HEAD_WIDTH, activation="relu"))
            self.cls_score = _dense(hp["num_classes"], BOX_HEAD_WIDTH, prefix="cls_score_")
            self.bbox_pred = _dense(4 * hp["num_classes"], BOX_HEAD_WIDTH, prefix="bbox_pred_")
            self.mask_head = gluon.nn.HybridSequential(prefix="mask_head_")
            with self.mask_head.name_scope():  # Kaiming-normal (fan out) from build's default initializer
                cin = FPN_CHANNELS
                for width in MASK_HEAD_LAYERS:
                    self.mask_head.add(_conv(width, 3, cin, activation="relu"))
                    cin = width
                self.mask_head.add(gluon.nn.Conv2DTranspose(cin, 2, 2, in_channels=cin, activation="relu"),
                                   gluon.nn.Conv2D(hp["num_classes"], 1, in_channels=cin))

    # ---- GeneralizedRCNNTransform
    def transform(self, images: list[Any], targets: list[dict[str, np.ndarray]]
                  ) -> tuple[Any, list[np.ndarray], list[np.ndarray], list[tuple[int, int]]]:
        """Normalize, resize (short side min_size, long side at most max_size: bilinear for the image,
        nearest for the masks), scale the boxes alike, pad the batch to a multiple of 32: (N, 3, H, W), the
        boxes, the (K, H, W) masks (host NumPy) and each image's resized size."""
        hp = self.hp
        ctx = images[0].context
        mean = mx.nd.array(hp["pixel_mean"], ctx=ctx).reshape((1, 3, 1, 1))
        std = mx.nd.array(hp["pixel_std"], ctx=ctx).reshape((1, 3, 1, 1))
        resized, boxes, masks, sizes = [], [], [], []
        for image, target in zip(images, targets):
            h, w = image.shape[-2:]
            scale = min(hp["min_size"] / min(h, w), hp["max_size"] / max(h, w))  # Python floats, as torchvision
            nh, nw = math.floor(h * scale), math.floor(w * scale)
            x = (image.expand_dims(0) - mean) / std
            resized.append(mx.nd.contrib.BilinearResize2D(x, height=nh, width=nw, align_corners=False))
            rh, rw = np.float32(nh) / np.float32(h), np.float32(nw) / np.float32(w)
            boxes.append(target["boxes"] * np.array([rw, rh, rw, rh], dtype=np.float32))
            masks.append(target["masks"][:, nearest_index(h, nh)][:, :, nearest_index(w, nw)])
            sizes.append((nh, nw))
        ph = int(math.ceil(max(s[0] for s in sizes) / SIZE_DIVISIBLE) * SIZE_DIVISIBLE)
        pw = int(math.ceil(max(s[1] for s in sizes) / SIZE_DIVISIBLE) * SIZE_DIVISIBLE)
        batch = mx.nd.concat(*[mx.nd.pad(x, mode="constant", pad_width=(0, 0, 0, 0, 0, ph - x.shape[2], 0, pw - x.shape[3]))
                               for x in resized], dim=0)
        return batch, boxes, masks, sizes

    def features(self, images: Any) -> list[Any]:
        """P2-P6: the FPN over conv2-conv5 (the coarsest level first, as FeaturePyramidNetwork), P6 = P5 at
        stride 2 (LastLevelMaxPool: max-pool with kernel 1)."""
        x, trunk = self.body[0](images), []
        for stage in range(1, 5):
            x = self.body[stage](x)
            trunk.append(x)
        inner = self.fpn_inner[3](trunk[3])
        pyramid = [self.fpn_layer[3](inner)]
        for i in (2, 1, 0):
            lateral = self.fpn_inner[i](trunk[i])
            h, w = lateral.shape[2:]
            up = inner.take(mx.nd.array(nearest_index(inner.shape[2], h), ctx=x.context), axis=2)
            up = up.take(mx.nd.array(nearest_index(inner.shape[3], w), ctx=x.context), axis=3)
            inner = lateral + up
            pyramid.insert(0, self.fpn_layer[i](inner))
        p6 = mx.nd.Pooling(pyramid[-1], kernel=(1, 1), stride=(2, 2), pool_type="max")
        return [*pyramid, p6]

    def rpn(self, feature: Any) -> tuple[Any, Any]:
        """RPNHead on one level: a 3x3 convolution with ReLU, then objectness logits and box deltas."""
        t = self.rpn_conv(feature)
        return self.rpn_cls(t), self.rpn_box(t)

    def pool(self, feats: list[Any], rois: list[np.ndarray], sizes: list[tuple[int, int]], size: int) -> Any:
        """MultiScaleRoIAlign over P2-P5: each RoI on its LevelMapper level; the levels' scales
        2^round(log2(map height / the largest resized image height)); sampling ratio 2, aligned False."""
        ctx = feats[0].context
        boxes = np.concatenate(rois)
        owner = np.concatenate([np.full(len(r), i, np.float32) for i, r in enumerate(rois)])
        level = roi_levels(boxes)
        top = max(s[0] for s in sizes)
        pieces, order = [], []
        for k, f in enumerate(feats[:LEVELS[1] - LEVELS[0] + 1]):
            at = np.flatnonzero(level == k)
            if len(at) == 0:
                continue
            scale = 2.0 ** round(math.log2(f.shape[2] / top))
            rows = mx.nd.array(np.concatenate([owner[at, None], boxes[at]], axis=1), ctx=ctx)
            pieces.append(mx.nd.contrib.ROIAlign(f, rows, pooled_size=(size, size), spatial_scale=scale,
                                                 sample_ratio=SAMPLING_RATIO, aligned=False))
            order.append(at)
        inverse = np.argsort(np.concatenate(order), kind="stable")
        return mx.nd.concat(*pieces, dim=0).take(mx.nd.array(inverse, ctx=ctx))

    def proposals(self, logits: list[np.ndarray], deltas: list[np.ndarray], anchors: list[np.ndarray],
                  size: tuple[int, int]) -> np.ndarray:
        """One image's proposals, as RegionProposalNetwork.filter_proposals: per level the top
        pre_nms_top_n objectness, decoded, clipped to the image, boxes under 1e-3 out, NMS per level
        (batched_nms), the post_nms_top_n best overall."""
        hp = self.hp
        boxes, scores, levels = [], [], []
        for k, (logit, delta, anchor) in enumerate(zip(logits, deltas, anchors)):
            top = np.argsort(-logit, kind="stable")[:min(int(hp["rpn_pre_nms_top_n"]), len(logit))]
            boxes.append(decode(delta[top], anchor[top], RPN_WEIGHTS))
            scores.append(logit[top])
            levels.append(np.full(len(top), k, np.int64))
        props, score, lvl = np.concatenate(boxes), 1 / (1 + np.exp(-np.concatenate(scores))), np.concatenate(levels)
        props[:, 0::2] = props[:, 0::2].clip(0, size[1])
        props[:, 1::2] = props[:, 1::2].clip(0, size[0])
        big = np.flatnonzero((props[:, 2] - props[:, 0] >= MIN_PROPOSAL_SIZE) & (props[:, 3] - props[:, 1] >= MIN_PROPOSAL_SIZE))
        keep = batched_nms(props[big], score[big], lvl[big], float(hp["rpn_nms_threshold"]))
        return props[big][keep[:int(hp["rpn_post_nms_top_n"])]]

    @staticmethod
    def mask_targets(masks: np.ndarray, rois: np.ndarray, gt_index: np.ndarray, ctx: mx.Context) -> Any:
        """project_masks_on_boxes: each RoI's matched (H, W) mask RoI-aligned to 28x28 on the RoI (scale 1,
        aligned False, the adaptive grid of ceil(RoI side / 28) samples per bin and side: sample_ratio -1)."""
        rows = np.concatenate([gt_index.astype(np.float32)[:, None], rois], axis=1)
        out = mx.nd.contrib.ROIAlign(mx.nd.array(masks[:, None].astype(np.float32), ctx=ctx), mx.nd.array(rows, ctx=ctx),
                                     pooled_size=(MASK_SIZE, MASK_SIZE), spatial_scale=1.0, sample_ratio=-1,
                                     aligned=False)
        return out[:, 0]

    # ---- the training forward: the five losses
    def forward(self, images: list[Any], targets: list[dict[str, np.ndarray]]) -> dict[str, Any]:
        hp, ctx = self.hp, images[0].context
        batch, gt_boxes, gt_masks, sizes = self.transform(images, targets)
        feats = self.features(batch)
        n = len(images)
        level_anchors, level_logits, level_deltas = [], [], []
        for f, anchor_size in zip(feats, hp["anchor_sizes"]):
            logit, delta = self.rpn(f)
            _, count, fh, fw = logit.shape
            level_logits.append(logit.transpose((0, 2, 3, 1)).reshape((n, -1)))
            level_deltas.append(delta.reshape((n, count, 4, fh, fw)).transpose((0, 3, 4, 1, 2)).reshape((n, -1, 4)))
            level_anchors.append(_det.anchors({"anchor_sizes": [anchor_size], "anchor_ratios": hp["anchor_ratios"]},
                                              batch.shape[2:], (fh, fw)))
        grid = np.concatenate(level_anchors)
        logits, deltas = mx.nd.concat(*level_logits, dim=1), mx.nd.concat(*level_deltas, dim=1)
        np_logits = [x.asnumpy() for x in level_logits]
        np_deltas = [x.asnumpy() for x in level_deltas]

        rpn_pos, rpn_neg, rpn_targets = [], [], []
        rois, roi_labels, roi_targets, positives, positive_labels, mask_targets = [], [], [], [], [], []
        for i, (boxes, target) in enumerate(zip(gt_boxes, targets)):
            # RPN targets over the anchors of every level
            pos, neg, rpn_target = _det.rpn_sample(boxes, grid, hp)
            rpn_pos.append(pos + i * len(grid))
            rpn_neg.append(neg + i * len(grid))
            rpn_targets.append(rpn_target)
            # proposals, with the ground truth added; RoI sampling and targets
            found = np.concatenate([self.proposals([x[i] for x in np_logits], [x[i] for x in np_deltas],
                                                   level_anchors, sizes[i]), boxes])
            matched = match(box_iou(boxes, found), hp["roi_fg_iou"], hp["roi_bg_iou"], low_quality=False)
            labels = np.where(matched >= 0, target["labels"][matched.clip(0)], np.where(matched == -1, 0, -1))
            pos, neg = sample(labels, hp["roi_batch_size"], hp["roi_positive_fraction"])
            chosen = np.sort(np.concatenate([pos, neg]))  # torchvision keeps the sampled RoIs in index order
            rois.append(found[chosen])
            roi_labels.append(labels[chosen])
            fg = chosen[labels[chosen] > 0]
            roi_targets.append(encode(boxes[matched[fg]], found[fg], ROI_WEIGHTS))
            # the mask branch: the positives, their ground-truth masks projected on their boxes
            positives.append(found[fg])
            positive_labels.append(labels[fg])
            if len(fg):
                mask_targets.append(self.mask_targets(gt_masks[i], found[fg], matched[fg], ctx))

        loss_objectness, loss_rpn_box = _det.rpn_losses(logits, deltas, rpn_pos, rpn_neg, rpn_targets, ctx)

        # the heads run once on every image's RoIs, as torchvision's
        hidden = self.box_head(self.pool(feats, rois, sizes, BOX_POOL))
        loss_classifier, loss_box_reg = _det.detector_losses(self.cls_score(hidden), self.bbox_pred(hidden), roi_labels,
                                                             roi_targets, hp["num_classes"], ctx)
        if mask_targets:
            mask_logits = self.mask_head(self.pool(feats, positives, sizes, MASK_POOL))
            classes = np.concatenate(positive_labels)  # each positive's map of its own class
            rows = np.arange(len(classes)) * hp["num_classes"] + classes
            chosen = mask_logits.reshape((-1, MASK_SIZE, MASK_SIZE)).take(mx.nd.array(rows, ctx=ctx))
            loss_mask = bce_with_logits(chosen, mx.nd.concat(*mask_targets, dim=0)).mean()
        else:  # torchvision: mask_logits.sum() * 0 on no positive (never here: the ground truth joins the RoIs)
            loss_mask = self.mask_head(mx.nd.zeros((1, FPN_CHANNELS, MASK_POOL, MASK_POOL), ctx=ctx)).sum() * 0
        return {"loss_classifier": loss_classifier, "loss_box_reg": loss_box_reg,
                "loss_objectness": loss_objectness, "loss_rpn_box_reg": loss_rpn_box, "loss_mask": loss_mask}


# --------------------------------------------------------------------------------------------
# Training


@dataclass
class Training:
    model: MaskRCNN
    trainer: gluon.Trainer


def build(hp: dict[str, Any], ctx: mx.Context) -> Training:
    model = MaskRCNN(hp, prefix="mask_rcnn_")
    # Kaiming-normal convolutions (fan out, ReLU gain) as torchvision's ResNet, MaskRCNNHeads and
    # MaskRCNNPredictor; the FPN's Kaiming-uniform (a=1), the RPN head's Normal(0.01) and the dense
    # layers' uniform draws come from their blocks' own initializers.
    model.initialize(mx.init.MSRAPrelu(factor_type="out", slope=0.0), ctx=ctx)
    for part in (model.body, model.fpn_inner, model.fpn_layer, model.box_head, model.mask_head):
        part.hybridize(static_alloc=True)
    trainer = gluon.Trainer(model.collect_params(), "sgd", {
        "learning_rate": hp["learning_rate"], "momentum": hp["momentum"],
        "wd": hp["weight_decay"],  # coupled L2 (grad + wd x weight), as PyTorch's SGD
    })
    return Training(model, trainer)


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The training-mode forward (batch norm on batch statistics; the box head on roi_batch_size sampled
    RoIs per image, the mask head on their positives) without a step: the five losses and, as pytorch.py's,
    the RPN head's outputs on P2 ((N, A, H, W) and (N, 4A, H, W)), which do not depend on sampling."""
    rpn: dict[str, Any] = {}
    model = training.model

    def first(key: str) -> Any:
        return lambda block, args, out: rpn.setdefault(key, out)
    handles = [model.rpn_cls.register_forward_hook(first("rpn_objectness")),
               model.rpn_box.register_forward_hook(first("rpn_deltas"))]
    try:
        with autograd.train_mode():
            losses = model(inputs["images"], inputs["targets"])
    finally:
        for handle in handles:
            handle.detach()
    return {k: v.asnumpy() for k, v in (losses | rpn).items()}
