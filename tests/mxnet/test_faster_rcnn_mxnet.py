"""Faster R-CNN on MXNet: torchvision's C4 FasterRCNN written out in Gluon, hyperparameters from
workload.toml, box pieces against NumPy references, a smoke step that learns. Runs in the MXNet stack
(`make test-mxnet`); parity with PyTorch is tests/test_detection_frameworks_mxnet.py."""

import math

import mxnet as mx
import numpy as np
import pytest

from tbdkit.spec import catalog
from model_checks import adapter as stack_adapter

MODEL = catalog.get("faster_rcnn")
WORKLOAD = catalog.load_module(MODEL, "mxnet")
DATA = catalog.load_module(MODEL, "data")
HP = MODEL.hp("smoke")


@pytest.fixture(scope="module")
def smoke():
    return stack_adapter("faster_rcnn", "mxnet")


def random_boxes(rng, n, size=100.0):
    xy = rng.uniform(0, size, (n, 2))
    wh = rng.uniform(1, size / 2, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(np.float32)


def iou_reference(a, b):
    lt, rb = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod((rb - lt).clip(0), axis=2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def nms_reference(boxes, scores, threshold):
    order, keep = list(np.argsort(-scores, kind="stable")), []
    while order:
        i = order.pop(0)
        keep.append(i)
        order = [j for j in order if iou_reference(boxes[i:i + 1], boxes[j:j + 1])[0, 0] <= threshold]
    return np.array(keep)


def test_batch_norm_state_is_torchvisions(smoke):
    info = smoke.model_info()
    assert info["non_trainable_state"] == 9_600  # running mean and variance of ResNet-18's 20 batch norms


def test_c4_split_and_head_sizes(smoke):
    model = smoke.training.model
    features = model.trunk(mx.nd.zeros((1, 3, 256, 384)))
    assert features.shape == (1, 256, 16, 24)  # conv1-conv4: stride 16, ResNet-18's conv4 width
    logits, deltas = model.rpn(features)
    assert logits.shape == (1, 9, 16, 24) and deltas.shape == (1, 36, 16, 24)
    pooled = mx.nd.zeros((3, 256, HP["roi_output_size"], HP["roi_output_size"]))
    assert model.head(pooled).shape == (3, 512)  # conv5 + global average pooling, per RoI
    assert model.cls_score(model.head(pooled)).shape == (3, HP["num_classes"])
    assert model.bbox_pred(model.head(pooled)).shape == (3, 4 * HP["num_classes"])


def test_resize_is_generalized_rcnn_transforms(smoke):
    images = [mx.nd.ones((3, 333, 500)), mx.nd.ones((3, 500, 375))]
    targets = [{"boxes": np.array([[0, 0, 500, 333]], np.float32)}, {"boxes": np.array([[0, 0, 375, 500]], np.float32)}]
    batch, sizes, boxes = smoke.training.model.transform(images, targets)
    assert sizes == [(256, 384), (341, 256)]  # short side 256, long side at most 400
    assert batch.shape == (2, 3, 352, 384)  # padded to multiples of 32
    np.testing.assert_allclose(boxes[0], [[0, 0, 384, 256]], rtol=1e-6)
    expected = (1 - np.array(HP["pixel_mean"])) / np.array(HP["pixel_std"])
    np.testing.assert_allclose(batch[0, :, 10, 10].asnumpy(), expected, rtol=1e-5)
    assert float(batch[0, :, 300:, :].abs().sum().asscalar()) == 0.0  # the padding is zeros


def test_sgd_settings_come_from_the_hyperparameters(smoke):
    opt = smoke.training.trainer._optimizer
    assert (opt.learning_rate, opt.momentum, opt.wd) == (HP["learning_rate"], HP["momentum"], HP["weight_decay"])


def test_box_iou_and_nms_match_numpy_references():
    rng = np.random.default_rng(0)
    a, b = random_boxes(rng, 7), random_boxes(rng, 11)
    np.testing.assert_allclose(WORKLOAD.box_iou(a, b), iou_reference(a, b), rtol=1e-5, atol=1e-6)
    boxes, scores = random_boxes(rng, 60), rng.uniform(0, 1, 60).astype(np.float32)
    for threshold in (0.3, 0.7):
        np.testing.assert_array_equal(WORKLOAD.nms(boxes, scores, threshold), nms_reference(boxes, scores, threshold))


def test_box_coding_is_torchvisions():
    ref = np.array([[0, 0, 10, 20], [5, 5, 15, 10]], np.float32)
    gt = np.array([[1, 2, 11, 22], [5, 5, 25, 15]], np.float32)
    weights = (10.0, 10.0, 5.0, 5.0)
    deltas = WORKLOAD.encode(gt, ref, weights)
    # by hand: dx = 10 (gx - rx) / rw, dw = 5 log(gw / rw)
    np.testing.assert_allclose(deltas, [[10 * 1 / 10, 10 * 2 / 20, 0, 0],
                                        [10 * 5 / 10, 10 * 2.5 / 5, 5 * math.log(2), 5 * math.log(2)]], rtol=1e-5)
    np.testing.assert_allclose(WORKLOAD.decode(deltas, ref, weights), gt, rtol=1e-5, atol=1e-4)
    huge = WORKLOAD.decode(np.array([[0, 0, 100, 100]], np.float32), ref[:1], (1.0, 1.0, 1.0, 1.0))
    assert huge[0, 2] - huge[0, 0] == pytest.approx(10 * 1000 / 16, rel=1e-4)  # clamped at log(1000 / 16)


def test_anchors_are_anchor_generators():
    grid = WORKLOAD.anchors(HP, (256, 384), (16, 24))
    assert grid.shape == (16 * 24 * 9, 4)
    # torchvision's cell anchors for sizes (128, 256, 512), ratios (0.5, 1, 2): ratio-major, rounded
    np.testing.assert_array_equal(grid[:3], [[-91, -45, 91, 45], [-181, -91, 181, 91], [-362, -181, 362, 181]])
    np.testing.assert_array_equal(grid[9] - grid[0], [16, 0, 16, 0])  # the next location, one stride right


def test_matcher_and_sampler_are_torchvisions():
    iou = np.array([[0.9, 0.5, 0.1, 0.0], [0.2, 0.6, 0.25, 0.35]], np.float32)
    np.testing.assert_array_equal(WORKLOAD.match(iou, 0.7, 0.3, low_quality=False), [0, -2, -1, -2])
    np.testing.assert_array_equal(WORKLOAD.match(iou, 0.7, 0.3, low_quality=True), [0, 1, -1, -2])
    labels = np.array([1] * 10 + [0] * 100 + [-1] * 5)
    pos, neg = WORKLOAD.sample(labels, 16, 0.25)
    assert len(pos) == 4 and len(neg) == 12 and (labels[pos] == 1).all() and (labels[neg] == 0).all()
    pos, neg = WORKLOAD.sample(labels[5:], 256, 0.5)
    assert len(pos) == 5 and len(neg) == 100


def test_four_finite_losses(smoke):
    inputs = smoke.prepare(next(DATA.synthetic_batches(HP, 2, seed=3)))
    losses = WORKLOAD.forward(smoke.training, inputs)
    assert sorted(losses) == ["loss_box_reg", "loss_classifier", "loss_objectness", "loss_rpn_box_reg",
                              "rpn_deltas", "rpn_objectness"]
    assert losses.pop("rpn_objectness").shape[:2] == (2, 9) and losses.pop("rpn_deltas").shape[:2] == (2, 36)
    assert all(np.isfinite(v).all() for v in losses.values()), losses
    assert losses["loss_classifier"] == pytest.approx(math.log(HP["num_classes"]), rel=0.5)
    assert losses["loss_objectness"] == pytest.approx(math.log(2), rel=0.2)
