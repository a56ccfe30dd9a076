"""Faster R-CNN and Mask R-CNN on every framework they have: the same network (parity of `tbdkit describe`: parameter
count, canonical per-layer shapes, FLOPs per sample), the listed state difference, and PyTorch's
weights read back unchanged in the others (and, in MXNet, the same RPN outputs). Parametrized as
tests/test_vision_frameworks.py. Needs every stack installed (`make test` sets them up)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from framework_parity import (assert_same_network, assert_smoke_flops, described_with_pytorch_weights,
                              listed_smoke_state)
from tbdkit.spec import catalog

# EfficientDet's TensorFlow and MXNet pairs are tests/test_efficientdet_frameworks.py.
FRAMEWORKS = {"faster_rcnn": ("pytorch", "tensorflow", "mxnet"), "mask_rcnn": ("pytorch", "tensorflow", "mxnet")}
MODELS = list(FRAMEWORKS)
# The RPN outputs of one set of weights agree to this fraction of their largest value (see the RPN test)
RPN_ATOL = 2e-4
PAIRS = [(m, a, b) for m in MODELS for a, b in itertools.combinations(FRAMEWORKS[m], 2)]
# Forward FLOPs of the smoke reference image (500x375, resized to 341x256, padded to 352x256) as both
# frameworks' training-mode forward passes run it: 2 per multiply-accumulate of every convolution and
# dense layer at the positions the pass produced. The detector head runs on exactly roi_batch_size
# (16) sampled RoIs, as in training, so the count does not depend on how many proposals survive NMS;
# a convolution's positions are every output map of the batch (conv5 runs once per RoI: 16 x 7x7),
# a dense layer's every row. ResNet-18's conv5 is 411 M multiply-accumulates per 7x7 RoI map, so the
# head alone is 16 x 822 M = 13.15 GFLOPs of the 18.6.
# Mask R-CNN's smoke reference image (640x480, resized to 256x192, no padding): ResNet-50 and the FPN
# on the whole image, the RPN head on P2-P6, the box head (TwoMLPHead and predictor) on the 32 sampled
# RoIs, the mask head and predictor on the positives among them. Unlike the box head's, the mask
# head's count depends on how many positives the RoI sampler finds (6 here, under the quota of 8): it
# is the same in every framework because with the same weights all compute the same proposals, and
# so the same positives (each 14x14 map: 1.06 GFLOPs in the mask head).
SMOKE_FORWARD_FLOPS = {"faster_rcnn": 18_616_025_088, "mask_rcnn": 25_737_742_336}


@pytest.fixture(scope="module")
def described(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """Each detector described in each framework, PyTorch's weights saved and loaded into the others."""
    return {(model, fw): d for model in MODELS for fw, d in described_with_pytorch_weights(
        model, FRAMEWORKS[model], tmp_path_factory.mktemp(model)).items()}


@pytest.mark.parametrize("model, a, b", PAIRS)
def test_the_same_network_on_each_pair(described, model, a, b):
    assert_same_network(described[model, a], described[model, b])


@pytest.mark.parametrize("model, framework", [(m, fw) for m in MODELS for fw in FRAMEWORKS[m]])
def test_flops_are_the_networks(described, model, framework):
    assert_smoke_flops(described[model, framework]["flops_per_sample"], SMOKE_FORWARD_FLOPS[model])


def test_faster_rcnn_layers_in_canonical_order(described):
    """conv1-conv4 (ResNet-18: conv1, 4 convolutions in conv2, 5 in conv3 and conv4, the last two with
    their projection shortcut; each with its batch norm), the RPN head's three convolutions, conv5
    (5 convolutions) and the predictor's two dense layers, in PyTorch's forward order."""
    kinds = [x["kind"] for x in described["faster_rcnn", "pytorch"]["layers"]]
    assert kinds.count("conv2d") == 15 + 3 + 5 and kinds.count("batchnorm") == 15 + 5
    assert kinds[-2:] == ["dense", "dense"] and kinds[30:33] == ["conv2d"] * 3


def test_mask_rcnn_layers_in_canonical_order(described):
    """ResNet-50 (53 convolutions, each with its batch norm), the FPN's 8 (lateral and output, the
    coarsest level first), the RPN head's 3, the box head's 4 dense layers, then the mask head's four
    3x3 convolutions, its transposed convolution and the per-class 1x1, in PyTorch's forward order;
    torchvision's 44,401,393 parameters plus the batch norms' scales and offsets."""
    layers = described["mask_rcnn", "pytorch"]["layers"]
    kinds = [x["kind"] for x in layers]
    assert kinds.count("conv2d") == 53 + 8 + 3 + 5 and kinds.count("batchnorm") == 53
    assert kinds[-10:] == ["dense"] * 4 + ["conv2d"] * 4 + ["conv_transpose2d", "conv2d"]
    norms = sum(sum(np.prod(shape) for shape in x["params"].values()) for x in layers if x["kind"] == "batchnorm")
    assert described["mask_rcnn", "pytorch"]["parameters"] - norms == 44_401_393
    # the mask head runs on whole 14x14 maps, one per positive RoI (the transposed convolution at its input)
    positives = layers[-1]["positions_per_sample"] // 28**2
    assert positives >= 1 and [x["positions_per_sample"] for x in layers[-6:-1]] == [positives * 14**2] * 5


@pytest.mark.parametrize("model", MODELS)
def test_state_differences_are_the_listed_ones(described, model):
    listed = listed_smoke_state(model)
    for fw in FRAMEWORKS[model]:
        assert described[model, fw]["framework_state"]["non_trainable_state"] == listed[fw]


@pytest.mark.parametrize("model", [m for m in MODELS if "mxnet" in FRAMEWORKS[m]])
def test_same_weights_same_rpn_outputs(described, model):
    """PyTorch's weights, moved through the canonical layout into MXNet, read back unchanged and give the
    same RPN outputs on the same two images (resize, normalization, trunk and RPN head agree
    numerically). The losses are not compared: each framework's samplers draw different anchors and
    RoIs, so the same weights give different losses."""
    theirs, ours = np.load(described[model, "pytorch"]["npz"]), np.load(described[model, "mxnet"]["npz"])
    keys = [k for k in theirs.files if "/" in k]
    assert keys == [k for k in ours.files if "/" in k]
    assert len(keys) == {
        # 23 convolutions (the RPN head's 3 with biases), 20 batch norms (gamma, beta), 2 dense layers (weight, bias)
        "faster_rcnn": 23 + 3 + 2 * 20 + 2 * 2,
        # ResNet-50's 53 bias-free convolutions and their batch norms (gamma, beta); with biases the FPN's 8
        # convolutions, the RPN head's 3, the mask head's 4, its transposed convolution and 1x1; 4 dense layers
        "mask_rcnn": 53 + 2 * 53 + 2 * (8 + 3 + 4 + 1 + 1) + 2 * 4,
    }[model]
    for key in keys:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    assert all(np.isfinite(ours[k]).all() for k in ours.files if k.startswith("loss_"))
    # the deterministic half of the network: resize and normalization, conv1-conv4, the RPN head; through Mask
    # R-CNN's 53 convolutions and FPN the two frameworks' oneDNN kernels sum in their own order, which on a CPU
    # with AMX moves a few of 18,432 objectness logits by up to 1.14e-4 (of a largest 1.0)
    for key in ("rpn_objectness", "rpn_deltas"):
        assert ours[key].shape == theirs[key].shape, key
        scale = float(np.abs(theirs[key]).max())
        np.testing.assert_allclose(ours[key], theirs[key], atol=RPN_ATOL * max(scale, 1.0), err_msg=key)


@pytest.mark.parametrize("model", MODELS)
def test_tensorflow_reads_back_pytorchs_weights(described, model):
    """PyTorch's weights, moved through the canonical layout into TensorFlow, read back unchanged and
    train to finite losses (TensorFlow's forward returns only the losses: its outputs are not compared)."""
    theirs, ours = np.load(described[model, "pytorch"]["npz"]), np.load(described[model, "tensorflow"]["npz"])
    keys = [k for k in theirs.files if "/" in k]
    assert keys and keys == [k for k in ours.files if "/" in k]
    for key in keys:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    assert all(np.isfinite(ours[k]).all() for k in ours.files if "/" not in k)


@pytest.mark.parametrize("framework", [fw for fw in FRAMEWORKS["mask_rcnn"] if fw != "pytorch"])
def test_mask_rcnn_same_weights_same_outputs(described, framework):
    """PyTorch's weights in TensorFlow and MXNet give the same RPN outputs on P2 (resize, normalization,
    ResNet-50 with batch statistics, the FPN's top-down path, the RPN head), and the same box-regression,
    RPN box and mask losses: on this probe every positive anchor and RoI is sampled (fewer than the
    quotas), so these losses do not depend on the samplers' draws and agree only if the proposals,
    RoI matching, multi-level RoI align, both heads and the mask targets do. The classifier and
    objectness losses average over randomly drawn negatives and are not compared."""
    theirs, ours = np.load(described["mask_rcnn", "pytorch"]["npz"]), np.load(described["mask_rcnn", framework]["npz"])
    for key in ("rpn_objectness", "rpn_deltas"):
        assert ours[key].shape == theirs[key].shape, key
        scale = float(np.abs(theirs[key]).max())
        np.testing.assert_allclose(ours[key], theirs[key], atol=RPN_ATOL * max(scale, 1.0), err_msg=key)
    for key in ("loss_box_reg", "loss_rpn_box_reg", "loss_mask"):
        np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-3, err_msg=key)
