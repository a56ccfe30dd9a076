"""EfficientDet-D0's structure and its anchor labelling, framework-neutral (NumPy), shared by
tensorflow.py and mxnet.py: effdet's tf_efficientdet_d0 config (the network's fixed structure, not
hyperparameters: those are in workload.toml), the anchors and effdet's target assignment, which
both run on the host before each step. pytorch.py uses effdet itself."""

from __future__ import annotations

import numpy as np

# effdet's tf_efficientdet_d0 config (effdet/config/model_config.py), the network's structure
BLOCKS = (  # timm's efficientnet_b0: (kind, repeats, kernel, stride, expansion, channels)
    ("ds", 1, 3, 1, 1, 16), ("ir", 2, 3, 2, 6, 24), ("ir", 2, 5, 2, 6, 40), ("ir", 3, 3, 2, 6, 80),
    ("ir", 3, 5, 1, 6, 112), ("ir", 4, 5, 2, 6, 192), ("ir", 1, 3, 1, 6, 320))
FEATURE_STAGES = (2, 4, 6)  # the stages whose last block feeds the FPN: strides 8, 16, 32
STEM, SE_RATIO, DROP_PATH = 32, 0.25, 0.2
MIN_LEVEL, MAX_LEVEL, FPN_CHANNELS, FPN_CELLS, HEAD_REPEATS = 3, 7, 64, 3, 3
NUM_SCALES, ASPECTS, ANCHOR_SCALE = 3, ((1.0, 1.0), (1.4, 0.7), (0.7, 1.4)), 4.0
ALPHA, GAMMA, DELTA, BOX_LOSS_WEIGHT, MATCH_THRESHOLD = 0.25, 1.5, 0.1, 50.0, 0.5
FUSION_EPS, PRIOR = 1e-4, 0.01
# batch norm (timm tf_ backbone; effdet FPN and heads), PyTorch's momentum convention (new statistics' weight)
BACKBONE_MOMENTUM, FPN_MOMENTUM, NORM_EPS = 0.1, 0.01, 1e-3
ANCHORS = NUM_SCALES * len(ASPECTS)
# BiFPN (effdet's bifpn_config): per node, its level and inputs (0-4 are P3-P7, 5+ earlier nodes)
NODES = ((6, (3, 4)), (5, (2, 5)), (4, (1, 6)), (3, (0, 7)),
         (4, (1, 7, 8)), (5, (2, 6, 9)), (6, (3, 5, 10)), (7, (4, 11)))


# ---------------------------------------------------------------------------------------------
# Anchors and target assignment (effdet/anchors.py with its object_detection matcher), in NumPy


def anchor_boxes(image_size: int) -> np.ndarray:
    """(A, 4) anchors as (y1, x1, y2, x2): per level, location-major, then octave, then aspect."""
    levels = []
    for level in range(MIN_LEVEL, MAX_LEVEL + 1):
        stride = 2 ** level
        centers = np.arange(stride / 2, image_size, stride)
        yc, xc = np.meshgrid(centers, centers, indexing="ij")
        boxes = []
        for octave in range(NUM_SCALES):
            for ax, ay in ASPECTS:
                base = ANCHOR_SCALE * stride * 2 ** (octave / NUM_SCALES)
                hx, hy = base * ax / 2.0, base * ay / 2.0
                boxes.append(np.stack([yc - hy, xc - hx, yc + hy, xc + hx], axis=-1).reshape(-1, 1, 4))
        levels.append(np.concatenate(boxes, axis=1).reshape(-1, 4))
    return np.concatenate(levels).astype(np.float32)


def iou(boxes: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """(N, A) intersection over union of (y1, x1, y2, x2) boxes."""
    y1, x1 = np.maximum(boxes[:, None, 0], anchors[None, :, 0]), np.maximum(boxes[:, None, 1], anchors[None, :, 1])
    y2, x2 = np.minimum(boxes[:, None, 2], anchors[None, :, 2]), np.minimum(boxes[:, None, 3], anchors[None, :, 3])
    inter = np.clip(y2 - y1, 0, None) * np.clip(x2 - x1, 0, None)
    area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])  # noqa: E731
    union = area(boxes)[:, None] + area(anchors)[None, :] - inter
    return np.where(inter > 0, inter / np.maximum(union, 1e-12), 0.0)


def label_anchors(anchors: np.ndarray, boxes: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """effdet's AnchorLabeler for one image: class targets (A,) 0-based, -1 for background; box targets
    (A, 4) Faster R-CNN encoded (ty, tx, th, tw), zero where unmatched; and the count of matched anchors.
    Each anchor takes the box of highest IoU at >= 0.5; each box also takes its best anchor."""
    valid = classes > -1
    boxes, classes = boxes[valid], classes[valid]
    count = len(anchors)
    if len(boxes) == 0:
        return np.full(count, -1, np.int64), np.zeros((count, 4), np.float32), 0
    overlaps = iou(boxes.astype(np.float64), anchors.astype(np.float64))
    match = overlaps.argmax(axis=0)
    match = np.where(overlaps.max(axis=0) >= MATCH_THRESHOLD, match, -1)
    match[overlaps.argmax(axis=1)] = np.arange(len(boxes))  # later boxes win, as the scatter does
    matched = match > -1
    cls = np.where(matched, classes[np.maximum(match, 0)] - 1, -1).astype(np.int64)
    eps = 1e-8
    gt = boxes[np.maximum(match, 0)].astype(np.float64)
    a = anchors.astype(np.float64)
    ha, wa = a[:, 2] - a[:, 0] + eps, a[:, 3] - a[:, 1] + eps
    h, w = gt[:, 2] - gt[:, 0] + eps, gt[:, 3] - gt[:, 1] + eps
    encoded = np.stack([((gt[:, 0] + gt[:, 2]) / 2 - (a[:, 0] + a[:, 2]) / 2) / ha,
                        ((gt[:, 1] + gt[:, 3]) / 2 - (a[:, 1] + a[:, 3]) / 2) / wa,
                        np.log(h / ha), np.log(w / wa)], axis=-1)
    return cls, np.where(matched[:, None], encoded, 0.0).astype(np.float32), int(matched.sum())
