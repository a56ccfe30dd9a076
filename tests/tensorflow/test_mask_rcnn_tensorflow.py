"""Mask R-CNN on TensorFlow: torchvision's maskrcnn_resnet50_fpn rebuilt from TF ops, its RoI align and
mask resize against NumPy references of torchvision's, the five losses, a smoke step that learns. Runs
in the TensorFlow stack; parity with PyTorch is tests/test_detection_frameworks.py."""


import numpy as np
import pytest
import tensorflow as tf

from tbdkit.spec import catalog
from model_checks import kept_learning_run, torchvision_roi_align

MODEL = catalog.get("mask_rcnn")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")
RNG = np.random.default_rng(0)
LOSSES = {"loss_objectness", "loss_rpn_box_reg", "loss_classifier", "loss_box_reg", "loss_mask"}


# the learning check's smoke network (its steps on a fixed batch), which the generated tests build anyway: this
# file's checks (counts, shapes, finite losses) hold for its trained weights as for new ones
run = kept_learning_run("mask_rcnn", "tensorflow")


@pytest.fixture(scope="module")
def smoke(run):
    return run.trained


def test_parameter_count_is_torchvisions(smoke):
    # torchvision's published 44,401,393 (frozen batch norm) plus the 53 batch norms' scales and offsets
    # (2 x 26,560 channels), which train when there are no pretrained weights
    info = smoke.model_info()
    assert info["parameters"] == 44_401_393 + 53_120  # workload.toml's [checks] smoke_parameters
    assert round(44_401_393 / 1e6, 1) == MODEL.info["params_millions"]
    assert info["non_trainable_state"] == 53_120  # moving mean and variance


def test_roi_align_is_torchvisions_border_included():
    """Sampling ratio 2 on a map at 1/8 scale, for RoIs inside, across and beyond the map's border."""
    feats = RNG.normal(size=(2, 10, 13, 3)).astype(np.float32)
    rois = np.array([[20.0, 16.0, 70.0, 60.0], [60.0, 40.0, 110.0, 85.0], [-12.0, -9.0, 30.0, 20.0],
                     [90.0, 70.0, 118.0, 90.0]], np.float32)
    owner = np.array([0, 1, 1, 0], np.int32)
    out = WORKLOAD.roi_align(tf.constant(feats), tf.constant(rois), tf.constant(owner), 3, 1 / 8, (2, 2)).numpy()
    for k in range(len(rois)):
        channels_first = torchvision_roi_align(np.moveaxis(feats[owner[k]], -1, 0), rois[k], 3, 1 / 8, (2, 2))
        np.testing.assert_allclose(out[k], np.moveaxis(channels_first, 0, -1),
                                   rtol=1e-4, atol=1e-5, err_msg=str(rois[k]))


def test_mask_targets_use_torchvisions_adaptive_grid():
    """project_masks_on_boxes: roi_align at scale 1 with ceil(side / 28) samples per bin and side."""
    masks = DATA.ellipse_masks(np.array([[10, 5, 90, 60], [30, 20, 70, 75]], np.float32), 80, 100).astype(np.float32)
    rois = np.array([[8.0, 3.0, 95.0, 62.0], [28.0, 25.0, 99.5, 80.0], [40.0, 30.0, 52.0, 41.0]], np.float32)
    index = np.array([0, 1, 0])
    targets = WORKLOAD.MaskRCNN.mask_targets(tf.constant(masks), tf.constant(rois), tf.constant(index)).numpy()
    assert targets.shape == (3, 28, 28)
    for k in range(3):
        expected = torchvision_roi_align(masks[index[k]][None], rois[k], 28, 1.0, None)[0]
        np.testing.assert_allclose(targets[k], expected, rtol=1e-4, atol=1e-5)


def test_nearest_resize_is_pytorchs():
    """F.interpolate(mode="nearest"): source index floor(i x in / out), not TF's half-pixel rounding."""
    x = tf.reshape(tf.range(7 * 5), (1, 7, 5))
    out = WORKLOAD.nearest(x, (4, 9)).numpy()[0]
    rows = np.floor(np.arange(4) * 7 / 4).astype(int)
    cols = np.minimum(np.floor(np.arange(9) * 5 / 9).astype(int), 4)
    np.testing.assert_array_equal(out, np.arange(35).reshape(7, 5)[rows][:, cols])


def test_pyramid_levels_and_strides(smoke):
    """P2-P6 at strides 4 to 64 on a 192x256 input, 256 channels each; P6 is P5 at stride 2."""
    feats = smoke.training.model.features(tf.zeros((1, 192, 256, 3)), False)
    assert [tuple(f.shape[1:]) for f in feats] == [(48, 64, 256), (24, 32, 256), (12, 16, 256), (6, 8, 256), (3, 4, 256)]
    np.testing.assert_array_equal(feats[4].numpy(), feats[3].numpy()[:, ::2, ::2])


def test_the_five_losses_are_finite(smoke):
    inputs = smoke.prepare(next(DATA.synthetic_batches(MODEL.hp("smoke"), 2, seed=0)))
    out = WORKLOAD.forward(smoke.training, inputs)
    assert LOSSES <= set(out)
    assert all(np.isfinite(out[k]) and out[k] >= 0 for k in LOSSES), out
    assert out["rpn_objectness"].shape[:2] == (2, 3) and out["rpn_deltas"].shape[:2] == (2, 12)
