"""Faster R-CNN on MXNet 1.9 Gluon: torchvision's FasterRCNN on a ResNet C4 trunk, written out.

The same network and training algorithm as pytorch.py: the resize to min_size/max_size and the
normalization inside the model (GeneralizedRCNNTransform, padded to a multiple of 32), anchors
(AnchorGenerator's order: per location, ratio-major), the RPN head (3x3 conv, objectness and box
deltas), proposals (top pre_nms_top_n, clip, NMS, top post_nms_top_n), the matchers and balanced
samplers, RoI align on conv4 (stride 16), conv5 + global average pooling per RoI, the predictor, the
box coder (weights 1 for the RPN, 10/10/5/5 for the detector, log(1000/16) clamp) and the four
losses (smooth L1 with beta 1/9). MXNet's own detection operators do the IoU (contrib.box_iou), NMS
(contrib.box_nms) and RoI align (contrib.ROIAlign); matching and sampling, which MXNet has no op for,
are NumPy on the host, as the RPN's targets are in MXNet's rcnn example. Every size and rate comes
from the hyperparameters handed in (workload.toml); nothing here times, logs or profiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from _shared import gluon_resnet as resnet

RPN_WEIGHTS = (1.0, 1.0, 1.0, 1.0)
ROI_WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # torchvision's RoIHeads box coder
CLAMP = math.log(1000.0 / 16)          # torchvision's bound on decoded log-scale deltas
SIZE_DIVISIBLE = 32                    # GeneralizedRCNNTransform pads the batch to multiples of 32
SMOOTH_L1_SIGMA = 3.0                  # MXNet's smooth_l1 with sigma 3 is torchvision's beta = 1 / 9
MIN_BOX = 1e-3                         # RPN proposals narrower than this are dropped (torchvision)


# --------------------------------------------------------------------------------------------
# Box pieces (NumPy, float32): coding, anchors, matching, sampling


def encode(gt: np.ndarray, ref: np.ndarray, weights: tuple[float, ...]) -> np.ndarray:
    """torchvision's BoxCoder.encode: (dx, dy, dw, dh) of boxes `gt` relative to `ref`, both (K, 4) x1y1x2y2."""
    wx, wy, ww, wh = weights
    rw, rh = ref[:, 2] - ref[:, 0], ref[:, 3] - ref[:, 1]
    gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
    dx = wx * ((gt[:, 0] + 0.5 * gw) - (ref[:, 0] + 0.5 * rw)) / rw
    dy = wy * ((gt[:, 1] + 0.5 * gh) - (ref[:, 1] + 0.5 * rh)) / rh
    return np.stack([dx, dy, ww * np.log(gw / rw), wh * np.log(gh / rh)], axis=1).astype(np.float32)


def decode(deltas: np.ndarray, ref: np.ndarray, weights: tuple[float, ...]) -> np.ndarray:
    """torchvision's BoxCoder.decode (one class): boxes from deltas (K, 4) applied to `ref` (K, 4)."""
    wx, wy, ww, wh = weights
    rw, rh = ref[:, 2] - ref[:, 0], ref[:, 3] - ref[:, 1]
    cx, cy = ref[:, 0] + 0.5 * rw, ref[:, 1] + 0.5 * rh
    dw, dh = np.minimum(deltas[:, 2] / ww, CLAMP), np.minimum(deltas[:, 3] / wh, CLAMP)
    px, py = deltas[:, 0] / wx * rw + cx, deltas[:, 1] / wy * rh + cy
    pw, ph = np.exp(dw) * rw, np.exp(dh) * rh
    return np.stack([px - 0.5 * pw, py - 0.5 * ph, px + 0.5 * pw, py + 0.5 * ph], axis=1).astype(np.float32)


def anchors(hp: dict[str, Any], padded: tuple[int, int], feature: tuple[int, int]) -> np.ndarray:
    """AnchorGenerator's anchors for one feature map: (H * W * A, 4), per location, ratio-major."""
    scales = np.asarray(hp["anchor_sizes"], dtype=np.float32)
    h_ratios = np.sqrt(np.asarray(hp["anchor_ratios"], dtype=np.float32))
    ws, hs = ((1 / h_ratios)[:, None] * scales[None, :]).ravel(), (h_ratios[:, None] * scales[None, :]).ravel()
    base = np.round(np.stack([-ws, -hs, ws, hs], axis=1) / 2)
    sy, sx = padded[0] // feature[0], padded[1] // feature[1]
    ys, xs = np.meshgrid(np.arange(feature[0]) * sy, np.arange(feature[1]) * sx, indexing="ij")
    shifts = np.stack([xs.ravel(), ys.ravel(), xs.ravel(), ys.ravel()], axis=1).astype(np.float32)
    return (shifts[:, None, :] + base[None, :, :]).reshape(-1, 4).astype(np.float32)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU (len(a), len(b)) of corner boxes, by MXNet's contrib.box_iou."""
    return mx.nd.contrib.box_iou(mx.nd.array(a), mx.nd.array(b), format="corner").asnumpy()


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    """Indices kept by greedy NMS at IoU `threshold`, by descending score (MXNet's contrib.box_nms)."""
    if len(boxes) == 0:
        return np.zeros(0, dtype=np.int64)
    rows = np.concatenate([np.arange(len(boxes), dtype=np.float32)[:, None], scores[:, None], boxes], axis=1)
    out = mx.nd.contrib.box_nms(mx.nd.array(rows), overlap_thresh=threshold, coord_start=2, score_index=1,
                                id_index=-1, force_suppress=True).asnumpy()
    return out[out[:, 1] >= 0, 0].astype(np.int64)


def match(iou: np.ndarray, fg: float, bg: float, low_quality: bool) -> np.ndarray:
    """torchvision's Matcher: the best ground truth per prediction, -1 below `bg`, -2 in between; with
    `low_quality`, each ground truth's best predictions (ties included) keep their match anyway."""
    best, matches = iou.max(axis=0), iou.argmax(axis=0)
    out = matches.copy()
    out[best < bg] = -1
    out[(best >= bg) & (best < fg)] = -2
    if low_quality:
        _, keep = np.nonzero(iou == iou.max(axis=1, keepdims=True))
        out[keep] = matches[keep]
    return out


def sample(labels: np.ndarray, batch: int, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """BalancedPositiveNegativeSampler: up to batch x fraction positives (label >= 1), the rest
    negatives (label 0), each drawn at random; returns (positive, negative) indices."""
    positive, negative = np.flatnonzero(labels >= 1), np.flatnonzero(labels == 0)
    n_pos = min(int(batch * fraction), len(positive))
    n_neg = min(batch - n_pos, len(negative))
    return np.random.permutation(positive)[:n_pos], np.random.permutation(negative)[:n_neg]


def rpn_sample(boxes: np.ndarray, grid: np.ndarray, hp: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image's RPN sample: anchors matched at rpn_fg_iou / rpn_bg_iou (low-quality matches kept),
    rpn_batch_size drawn; the positive and negative anchor indices and the positives' box targets."""
    matched = match(box_iou(boxes, grid), hp["rpn_fg_iou"], hp["rpn_bg_iou"], low_quality=True)
    labels = np.where(matched >= 0, 1, np.where(matched == -1, 0, -1))
    pos, neg = sample(labels, hp["rpn_batch_size"], hp["rpn_positive_fraction"])
    return pos, neg, encode(boxes[matched[pos]], grid[pos], RPN_WEIGHTS)


def proposals(hp: dict[str, Any], logits: np.ndarray, deltas: np.ndarray, grid: np.ndarray,
              size: tuple[int, int]) -> np.ndarray:
    """RegionProposalNetwork.filter_proposals for one image: top pre_nms_top_n by objectness, decoded,
    clipped to the (resized) image, small boxes dropped, NMS, the best post_nms_top_n kept."""
    top = np.argsort(-logits, kind="stable")[:min(int(hp["rpn_pre_nms_top_n"]), len(logits))]
    boxes = decode(deltas[top], grid[top], RPN_WEIGHTS)
    boxes[:, 0::2] = boxes[:, 0::2].clip(0, size[1])
    boxes[:, 1::2] = boxes[:, 1::2].clip(0, size[0])
    scores = 1 / (1 + np.exp(-logits[top]))
    keep = np.flatnonzero((boxes[:, 2] - boxes[:, 0] >= MIN_BOX) & (boxes[:, 3] - boxes[:, 1] >= MIN_BOX))
    kept = keep[nms(boxes[keep], scores[keep], float(hp["rpn_nms_threshold"]))]
    return boxes[kept[:int(hp["rpn_post_nms_top_n"])]]


# --------------------------------------------------------------------------------------------
# The losses


def bce_with_logits(x: Any, y: Any) -> Any:
    """Binary cross-entropy of logits `x` against targets `y`, element-wise, in its stable form."""
    return mx.nd.relu(x) - x * y + mx.nd.log1p(mx.nd.exp(-mx.nd.abs(x)))


def rpn_losses(logits: Any, deltas: Any, positives: list[np.ndarray], negatives: list[np.ndarray],
               targets: list[np.ndarray], ctx: mx.Context) -> tuple[Any, Any]:
    """The RPN's losses over the images' sampled anchors (indices into logits (N, K) and deltas (N, K, 4)
    flattened): objectness binary cross-entropy, and the positives' smooth L1 over the sampled count."""
    pos, sampled = np.concatenate(positives), np.concatenate([*positives, *negatives])
    x = logits.reshape((-1,)).take(mx.nd.array(sampled, ctx=ctx))
    y = mx.nd.array((np.arange(len(sampled)) < len(pos)).astype(np.float32), ctx=ctx)
    loss_objectness = bce_with_logits(x, y).mean()
    picked = deltas.reshape((-1, 4)).take(mx.nd.array(pos, ctx=ctx))
    loss_rpn_box = mx.nd.smooth_l1(picked - mx.nd.array(np.concatenate(targets), ctx=ctx),
                                   scalar=SMOOTH_L1_SIGMA).sum() / len(sampled)
    return loss_objectness, loss_rpn_box


def detector_losses(class_logits: Any, box_regression: Any, roi_labels: list[np.ndarray],
                    roi_targets: list[np.ndarray], num_classes: int, ctx: mx.Context) -> tuple[Any, Any]:
    """The detector's losses over the sampled RoIs: cross-entropy of the class logits, and the smooth L1
    of each positive's own class's box deltas over the RoI count."""
    labels = np.concatenate(roi_labels)
    loss_classifier = -mx.nd.pick(mx.nd.log_softmax(class_logits), mx.nd.array(labels, ctx=ctx)).mean()
    fg = np.flatnonzero(labels > 0)
    rows = box_regression.reshape((-1, 4)).take(mx.nd.array(fg * num_classes + labels[fg], ctx=ctx))
    loss_box_reg = mx.nd.smooth_l1(rows - mx.nd.array(np.concatenate(roi_targets), ctx=ctx),
                                   scalar=SMOOTH_L1_SIGMA).sum() / len(labels)
    return loss_classifier, loss_box_reg


# --------------------------------------------------------------------------------------------
# The network


class RPNHead(gluon.HybridBlock):
    """torchvision's RPNHead: a 3x3 conv + ReLU, then 1x1 convs for A objectness logits and 4A deltas."""

    def __init__(self, channels: int, count: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        init = mx.init.Normal(0.01)  # torchvision's RPNHead initialization, biases 0
        with self.name_scope():
            self.conv = gluon.nn.Conv2D(channels, 3, 1, 1, in_channels=channels, weight_initializer=init)
            self.cls_logits = gluon.nn.Conv2D(count, 1, in_channels=channels, weight_initializer=init)
            self.bbox_pred = gluon.nn.Conv2D(4 * count, 1, in_channels=channels, weight_initializer=init)

    def hybrid_forward(self, F: Any, x: Any) -> tuple[Any, Any]:
        t = F.relu(self.conv(x))
        return self.cls_logits(t), self.bbox_pred(t)


class FasterRCNN(gluon.Block):
    """conv1-conv4 (stride 16) -> RPN; RoI align -> conv5 + global average pooling -> class and box heads."""

    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hp = hp
        count = len(hp["anchor_sizes"]) * len(hp["anchor_ratios"])
        with self.name_scope():
            self.trunk = gluon.nn.HybridSequential(prefix="trunk_")
            with self.trunk.name_scope():
                channels = resnet.add_stem(self.trunk)
                for stage in range(3):
                    channels = resnet.add_stage(self.trunk, hp["backbone"], stage, channels)
            self.rpn = RPNHead(channels, count, prefix="rpn_")
            self.head = gluon.nn.HybridSequential(prefix="head_")
            with self.head.name_scope():
                width = resnet.add_stage(self.head, hp["backbone"], 3, channels)
                self.head.add(gluon.nn.GlobalAvgPool2D(), gluon.nn.Flatten())
            self.cls_score = gluon.nn.Dense(hp["num_classes"], in_units=width, prefix="cls_score_")
            self.bbox_pred = gluon.nn.Dense(4 * hp["num_classes"], in_units=width, prefix="bbox_pred_")

    def transform(self, images: list[Any], targets: list[dict[str, np.ndarray]]) -> tuple[Any, list, list]:
        """GeneralizedRCNNTransform: normalize, resize (short side min_size, long side at most max_size,
        bilinear), scale the boxes alike and pad the batch to a multiple of 32; returns the batch, the
        resized sizes and the resized boxes."""
        hp = self.hp
        ctx = images[0].context
        mean = mx.nd.array(hp["pixel_mean"], ctx=ctx).reshape((1, 3, 1, 1))
        std = mx.nd.array(hp["pixel_std"], ctx=ctx).reshape((1, 3, 1, 1))
        resized, sizes, boxes = [], [], []
        for image, target in zip(images, targets):
            h, w = image.shape[-2:]
            scale = min(hp["min_size"] / min(h, w), hp["max_size"] / max(h, w))  # Python floats, as torchvision
            nh, nw = math.floor(h * scale), math.floor(w * scale)
            x = (image.expand_dims(0) - mean) / std
            resized.append(mx.nd.contrib.BilinearResize2D(x, height=nh, width=nw, align_corners=False))
            sizes.append((nh, nw))
            boxes.append(target["boxes"] * np.array([nw / w, nh / h, nw / w, nh / h], dtype=np.float32))
        ph = int(math.ceil(max(s[0] for s in sizes) / SIZE_DIVISIBLE) * SIZE_DIVISIBLE)
        pw = int(math.ceil(max(s[1] for s in sizes) / SIZE_DIVISIBLE) * SIZE_DIVISIBLE)
        batch = mx.nd.concat(*[mx.nd.pad(x, mode="constant", pad_width=(0, 0, 0, 0, 0, ph - x.shape[2], 0, pw - x.shape[3]))
                               for x in resized], dim=0)
        return batch, sizes, boxes

    def forward(self, images: list[Any], targets: list[dict[str, np.ndarray]]) -> dict[str, Any]:
        """The four training losses (objectness, RPN box, classifier, detector box) for a batch."""
        hp, ctx = self.hp, images[0].context
        batch, sizes, gt_boxes = self.transform(images, targets)
        features = self.trunk(batch)
        logits, deltas = self.rpn(features)
        n, count, fh, fw = logits.shape
        logits = logits.transpose((0, 2, 3, 1)).reshape((n, -1))
        deltas = deltas.reshape((n, count, 4, fh, fw)).transpose((0, 3, 4, 1, 2)).reshape((n, -1, 4))
        grid = anchors(hp, batch.shape[2:], (fh, fw))
        np_logits, np_deltas = logits.asnumpy(), deltas.asnumpy()

        # RPN targets, over all images at once as torchvision concatenates them
        rpn_pos, rpn_neg, rpn_targets = [], [], []
        rois, roi_labels, roi_targets = [], [], []
        for i, (boxes, target) in enumerate(zip(gt_boxes, targets)):
            pos, neg, rpn_target = rpn_sample(boxes, grid, hp)
            rpn_pos.append(pos + i * len(grid))
            rpn_neg.append(neg + i * len(grid))
            rpn_targets.append(rpn_target)

            # detector targets: proposals plus the ground truth, matched at roi_fg_iou / roi_bg_iou
            found = np.concatenate([proposals(hp, np_logits[i], np_deltas[i], grid, sizes[i]), boxes])
            matched = match(box_iou(boxes, found), hp["roi_fg_iou"], hp["roi_bg_iou"], low_quality=False)
            labels = np.where(matched >= 0, target["labels"][matched.clip(0)], np.where(matched == -1, 0, -1))
            pos, neg = sample(labels, hp["roi_batch_size"], hp["roi_positive_fraction"])
            chosen = np.sort(np.concatenate([pos, neg]))  # torchvision keeps the sampled RoIs in index order
            rois.append(np.concatenate([np.full((len(chosen), 1), i, np.float32), found[chosen]], axis=1))
            roi_labels.append(labels[chosen])
            fg = labels[chosen] > 0
            roi_targets.append(encode(boxes[matched[chosen][fg]], found[chosen][fg], ROI_WEIGHTS))

        loss_objectness, loss_rpn_box = rpn_losses(logits, deltas, rpn_pos, rpn_neg, rpn_targets, ctx)

        pooled = mx.nd.contrib.ROIAlign(features, mx.nd.array(np.concatenate(rois), ctx=ctx),
                                        pooled_size=(hp["roi_output_size"],) * 2,
                                        spatial_scale=fh / batch.shape[2], sample_ratio=2)
        hidden = self.head(pooled)
        loss_classifier, loss_box_reg = detector_losses(self.cls_score(hidden), self.bbox_pred(hidden), roi_labels,
                                                        roi_targets, hp["num_classes"], ctx)
        return {"loss_classifier": loss_classifier, "loss_box_reg": loss_box_reg,
                "loss_objectness": loss_objectness, "loss_rpn_box_reg": loss_rpn_box}


# --------------------------------------------------------------------------------------------
# Training


@dataclass
class Training:
    model: FasterRCNN
    trainer: gluon.Trainer


def build(hp: dict[str, Any], ctx: mx.Context) -> Training:
    model = FasterRCNN(hp, prefix="faster_rcnn_")
    # Kaiming-normal convolutions (fan out, ReLU gain) as torchvision's ResNet; the RPN head's own
    # Normal(0.01) and the dense layers' uniform draws come from their blocks' initializers.
    model.initialize(mx.init.MSRAPrelu(factor_type="out", slope=0.0), ctx=ctx)
    for dense in (model.cls_score, model.bbox_pred):
        dense.initialize(mx.init.Uniform(1 / math.sqrt(dense.weight.shape[1])), ctx=ctx, force_reinit=True)
    model.trunk.hybridize(static_alloc=True)
    model.head.hybridize(static_alloc=True)
    trainer = gluon.Trainer(model.collect_params(), "sgd", {
        "learning_rate": hp["learning_rate"], "momentum": hp["momentum"],
        "wd": hp["weight_decay"],  # coupled L2 (grad + wd x weight), as PyTorch's SGD
    })
    return Training(model, trainer)


def to_device(batch: Any, ctx: mx.Context) -> dict[str, Any]:
    """Images as a list of (3, H, W) arrays on the device; targets stay NumPy (matching and sampling
    run on the host)."""
    return {"images": [mx.nd.array(image, ctx=ctx) for image in batch.images], "targets": batch.targets}


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The training-mode forward pass without a step (its four losses; batch norm on batch statistics,
    as PyTorch's model in train mode): the detector head runs on exactly roi_batch_size RoIs per image,
    as in training, so FLOPs and layer positions match PyTorch's. The RPN head's outputs, (N, C, H, W),
    come along: they do not depend on the samplers' draws."""
    rpn: dict[str, Any] = {}
    handle = training.model.rpn.register_forward_hook(
        lambda block, args, out: rpn.update(rpn_objectness=out[0], rpn_deltas=out[1]))
    try:
        with autograd.train_mode():
            losses = training.model(inputs["images"], inputs["targets"])
    finally:
        handle.detach()
    return {k: v.asnumpy() for k, v in (losses | rpn).items()}


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> Any:
    """One SGD step on the sum of the RPN and detector losses."""
    with autograd.record():
        losses = training.model(inputs["images"], inputs["targets"])
        loss = mx.nd.add_n(*[value.astype("float32") for value in losses.values()])
        with precision.scale_loss(loss, training.trainer) as scaled:
            autograd.backward(scaled)
    training.trainer.step(1)  # the losses are already means
    return loss
