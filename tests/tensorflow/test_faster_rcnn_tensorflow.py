"""Faster R-CNN on TensorFlow: torchvision's C4 FasterRCNN rebuilt from TF ops, its detection pieces
against NumPy references, a smoke step that learns. Runs in the TensorFlow stack; parity with the
other frameworks is tests/test_detection_frameworks.py."""


import numpy as np
import pytest
import tensorflow as tf

from tbdkit.spec import catalog
from model_checks import kept_learning_run

MODEL = catalog.get("faster_rcnn")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")
RNG = np.random.default_rng(0)


# the learning check's smoke network (its steps on a fixed batch), which the generated tests build anyway: this
# file's checks (counts, shapes, finite losses) hold for its trained weights as for new ones
run = kept_learning_run("faster_rcnn", "tensorflow")


@pytest.fixture(scope="module")
def smoke(run):
    return run.trained


def random_boxes(n, size=100.0):
    xy = RNG.uniform(0, size, (n, 2))
    wh = RNG.uniform(2, size / 2, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(np.float32)


def np_iou(a, b):
    lt, rb = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None] - inter)


def test_iou_and_box_coding_match_numpy():
    a, b = random_boxes(7), random_boxes(11)
    np.testing.assert_allclose(WORKLOAD.box_iou(tf.constant(a), tf.constant(b)).numpy(), np_iou(a, b), rtol=1e-5)
    w = WORKLOAD.ROI_WEIGHTS
    deltas = WORKLOAD.encode(tf.constant(a), tf.constant(b[:7]), w).numpy()
    pw, gw = b[:7, 2] - b[:7, 0], a[:, 2] - a[:, 0]
    np.testing.assert_allclose(deltas[:, 0], 10 * ((a[:, 0] + gw / 2) - (b[:7, 0] + pw / 2)) / pw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(deltas[:, 2], 5 * np.log(gw / pw), rtol=1e-4, atol=1e-5)
    back = WORKLOAD.decode(tf.constant(deltas), tf.constant(b[:7]), w).numpy()
    np.testing.assert_allclose(back, a, rtol=1e-4, atol=1e-3)


def test_nms_keeps_what_greedy_numpy_keeps():
    boxes, scores = random_boxes(60), RNG.uniform(size=60).astype(np.float32)
    keep = WORKLOAD.tf.image.non_max_suppression(boxes, scores, 20, 0.7).numpy()
    order, expected = list(np.argsort(-scores)), []
    iou = np_iou(boxes, boxes)
    while order and len(expected) < 20:
        i = order.pop(0)
        expected.append(i)
        order = [j for j in order if iou[i, j] <= 0.7]
    assert list(keep) == expected


def test_matcher_and_sampler_follow_torchvision():
    iou = tf.constant([[0.9, 0.5, 0.1, 0.2], [0.1, 0.6, 0.15, 0.25]])
    # columns: 0 matches row 0; 1 is between (-2) but is row 1's best (low quality: kept); 2 below (-1);
    # 3 is between (0.25 in [0.2, 0.7)) -> -2
    assert WORKLOAD.match(iou, 0.7, 0.2, True).numpy().tolist() == [0, 1, -1, -2]
    assert WORKLOAD.match(iou, 0.7, 0.2, False).numpy().tolist() == [0, -2, -1, -2]
    labels = tf.constant([1] * 10 + [0] * 100 + [-1] * 5)
    pos, neg = WORKLOAD.sample(labels, 16, 0.25)
    assert len(pos) == 4 and len(neg) == 12
    assert set(pos.numpy()) <= set(range(10)) and set(neg.numpy()) <= set(range(10, 110))


def test_anchors_are_torchvisions():
    hp = MODEL.hp("smoke")
    anchors = WORKLOAD.anchors_for((2, 3), (16, 16), hp).numpy()
    assert anchors.shape == (2 * 3 * 9, 4)
    # the first position's first anchor: ratio 0.5 (h = 0.707 s, w = 1.414 s), size 128
    np.testing.assert_allclose(anchors[0], np.round(np.array([-181.02, -90.51, 181.02, 90.51]) / 2))
    np.testing.assert_allclose(anchors[9] - anchors[0], [16, 0, 16, 0])  # next position: one stride right


def test_roi_align_averages_bilinear_samples_as_torchvision():
    """sampling_ratio 2, aligned False, a box inside the map: the mean of 4 bilinear samples per bin."""
    feats = RNG.normal(size=(1, 12, 14, 3)).astype(np.float32)
    roi, scale, size = np.array([[32.0, 24.0, 150.0, 120.0]], np.float32), 1 / 16, 2
    out = WORKLOAD.roi_align(tf.constant(feats), tf.constant(roi), size, scale).numpy()[0]

    def bilinear(y, x):
        y0, x0 = int(np.floor(y)), int(np.floor(x))
        ly, lx = y - y0, x - x0
        f = feats[0]
        return ((1 - ly) * (1 - lx) * f[y0, x0] + (1 - ly) * lx * f[y0, x0 + 1]
                + ly * (1 - lx) * f[y0 + 1, x0] + ly * lx * f[y0 + 1, x0 + 1])

    x1, y1, x2, y2 = roi[0] * scale
    bw, bh = max(x2 - x1, 1) / size, max(y2 - y1, 1) / size
    for py in range(size):
        for px in range(size):
            samples = [bilinear(y1 + py * bh + (iy + 0.5) * bh / 2, x1 + px * bw + (ix + 0.5) * bw / 2)
                       for iy in range(2) for ix in range(2)]
            np.testing.assert_allclose(out[py, px], np.mean(samples, axis=0), rtol=1e-4, atol=1e-5)


def test_the_four_losses_are_finite(smoke):
    inputs = smoke.prepare(next(DATA.synthetic_batches(MODEL.hp("smoke"), 2, seed=0)))
    losses = WORKLOAD.forward(smoke.training, inputs)
    assert set(losses) == {"loss_objectness", "loss_rpn_box_reg", "loss_classifier", "loss_box_reg"}
    assert all(np.isfinite(v) and v >= 0 for v in losses.values()), losses
