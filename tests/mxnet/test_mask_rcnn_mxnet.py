"""Mask R-CNN on MXNet: torchvision's maskrcnn_resnet50_fpn written out in Gluon, its RoI align, mask
targets, mask resize, batched NMS and level mapping against NumPy references of torchvision's, the five
losses, a smoke step that learns. Runs in the MXNet stack; parity with PyTorch is
tests/test_detection_frameworks.py."""

import math

import mxnet as mx
import numpy as np
import pytest

from tbdkit.spec import catalog
from model_checks import adapter as stack_adapter, torchvision_roi_align

MODEL = catalog.get("mask_rcnn")
WORKLOAD = catalog.load_module(MODEL, "mxnet")
DATA = catalog.load_module(MODEL, "data")
HP = MODEL.hp("smoke")
RNG = np.random.default_rng(0)
LOSSES = {"loss_objectness", "loss_rpn_box_reg", "loss_classifier", "loss_box_reg", "loss_mask"}


@pytest.fixture(scope="module")
def smoke():
    return stack_adapter("mask_rcnn", "mxnet")


def test_parameter_count_is_torchvisions(smoke):
    # torchvision's published 44,401,393 (frozen batch norm) plus the 53 batch norms' gamma and beta
    # (2 x 26,560 channels), which train when there are no pretrained weights
    info = smoke.model_info()
    assert info["parameters"] == 44_401_393 + 53_120  # workload.toml's [checks] smoke_parameters
    assert info["non_trainable_state"] == 53_120  # running mean and variance


def test_multiscale_roi_align_is_torchvisions_border_included(smoke):
    """MultiScaleRoIAlign: each RoI on its level (P2 at 1/4 ... P5 at 1/32), sampling ratio 2, for RoIs
    inside, across and beyond the maps' border; the output in the RoIs' order."""
    sizes = [(256, 320), (240, 320)]
    feats = [RNG.normal(size=(2, 3, 256 // s, 320 // s)).astype(np.float32) for s in (4, 8, 16, 32)]
    rois = [np.array([[20.0, 16.0, 70.0, 60.0], [-12.0, -9.0, 30.0, 20.0], [0.0, 0.0, 319.0, 255.0]], np.float32),
            np.array([[60.0, 40.0, 110.0, 85.0], [200.0, 150.0, 340.0, 270.0], [5.0, 5.0, 9.0, 8.0]], np.float32)]
    out = smoke.training.model.pool([mx.nd.array(f) for f in feats], rois, sizes, 3).asnumpy()
    levels = WORKLOAD.roi_levels(np.concatenate(rois))
    assert sorted(set(levels.tolist())) == [0, 1, 2]  # several levels in play, out of RoI order
    for k, (image, roi) in enumerate([(i, r) for i, rs in enumerate(rois) for r in rs]):
        expected = torchvision_roi_align(feats[levels[k]][image], roi, 3, 1 / 4 / 2 ** levels[k], (2, 2))
        np.testing.assert_allclose(out[k], expected, rtol=1e-4, atol=1e-5, err_msg=str(roi))


def test_level_mapper_is_torchvisions():
    """floor(4 + log2(sqrt(area) / 224) + 1e-6), clamped to P2-P5."""
    sides = np.array([10.0, 111.9, 112.0, 223.9, 224.0, 447.9, 448.0, 2000.0], np.float32)
    boxes = np.stack([np.zeros_like(sides), np.zeros_like(sides), sides, sides], axis=1)
    np.testing.assert_array_equal(WORKLOAD.roi_levels(boxes), [0, 0, 1, 1, 2, 2, 3, 3])


def test_mask_targets_use_torchvisions_adaptive_grid():
    """project_masks_on_boxes: roi_align at scale 1 with ceil(side / 28) samples per bin and side."""
    masks = DATA.ellipse_masks(np.array([[10, 5, 90, 60], [30, 20, 70, 75]], np.float32), 80, 100)
    rois = np.array([[8.0, 3.0, 95.0, 62.0], [28.0, 25.0, 99.5, 80.0], [40.0, 30.0, 52.0, 41.0]], np.float32)
    index = np.array([0, 1, 0])
    targets = WORKLOAD.MaskRCNN.mask_targets(masks, rois, index, mx.cpu()).asnumpy()
    assert targets.shape == (3, 28, 28)
    for k in range(3):
        expected = torchvision_roi_align(masks[index[k]][None].astype(np.float32), rois[k], 28, 1.0, None)[0]
        np.testing.assert_allclose(targets[k], expected, rtol=1e-4, atol=1e-5)


def test_nearest_resize_is_pytorchs():
    """F.interpolate(mode="nearest"): source index floor(i x in / out)."""
    np.testing.assert_array_equal(WORKLOAD.nearest_index(7, 4), np.floor(np.arange(4) * 7 / 4).astype(int))
    np.testing.assert_array_equal(WORKLOAD.nearest_index(5, 9), np.minimum(np.floor(np.arange(9) * 5 / 9), 4))
    np.testing.assert_array_equal(WORKLOAD.nearest_index(3, 6), [0, 0, 1, 1, 2, 2])


def test_batched_nms_keeps_levels_apart():
    """Boxes on different levels never suppress each other; within a level greedy NMS by score."""
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [0, 0, 10, 10], [20, 20, 30, 30]], np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6], np.float32)
    np.testing.assert_array_equal(WORKLOAD.batched_nms(boxes, scores, np.array([0, 0, 1, 0]), 0.7), [0, 2, 3])
    np.testing.assert_array_equal(WORKLOAD.batched_nms(boxes, scores, np.array([0, 1, 1, 0]), 0.7), [0, 1, 3])


def test_pyramid_levels_and_strides(smoke):
    """P2-P6 at strides 4 to 64 on a 192x256 input, 256 channels each; P6 is P5 at stride 2."""
    feats = smoke.training.model.features(mx.nd.array(RNG.normal(size=(1, 3, 192, 256))))
    assert [f.shape[1:] for f in feats] == [(256, 48, 64), (256, 24, 32), (256, 12, 16), (256, 6, 8), (256, 3, 4)]
    np.testing.assert_array_equal(feats[4].asnumpy(), feats[3].asnumpy()[:, :, ::2, ::2])


def test_sgd_settings_come_from_the_hyperparameters(smoke):
    opt = smoke.training.trainer._optimizer
    assert (opt.learning_rate, opt.momentum, opt.wd) == (HP["learning_rate"], HP["momentum"], HP["weight_decay"])


def test_the_five_losses_are_finite(smoke):
    inputs = smoke.prepare(next(DATA.synthetic_batches(HP, 2, seed=0)))
    out = WORKLOAD.forward(smoke.training, inputs)
    assert set(out) == LOSSES | {"rpn_objectness", "rpn_deltas"}
    assert all(np.isfinite(out[k]).all() and (out[k] >= 0).all() for k in LOSSES), out
    assert out["rpn_objectness"].shape[:2] == (2, 3) and out["rpn_deltas"].shape[:2] == (2, 12)
    assert float(out["loss_classifier"][0]) == pytest.approx(math.log(HP["num_classes"]), rel=0.5)
