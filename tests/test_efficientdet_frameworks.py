"""EfficientDet-D0 on every framework it has: the same network (parity of `tbdkit describe`), the
same weights giving the same outputs, and the listed state differences. Needs the stacks installed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from framework_parity import assert_same_network, described_with_pytorch_weights, listed_smoke_state, run_in_stack
from tbdkit.spec import catalog

MODEL = "efficientdet"
FRAMEWORKS = ("pytorch", "tensorflow", "mxnet")
PAIRS = list(itertools.combinations(catalog.get(MODEL).frameworks, 2))


@pytest.fixture(scope="module")
def described(tmp_path_factory) -> dict[str, dict]:
    """EfficientDet described in each framework, PyTorch's weights saved and loaded into the others."""
    return described_with_pytorch_weights(MODEL, catalog.get(MODEL).frameworks, tmp_path_factory.mktemp(MODEL))


@pytest.mark.parametrize("a, b", PAIRS)
def test_the_same_network_on_each_pair(described, a, b):
    da, db = described[a], described[b]
    assert_same_network(da, db)
    assert da["parameters"] == 3_880_067
    assert [x["positions_per_sample"] for x in da["layers"]] == [x["positions_per_sample"] for x in db["layers"]]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_flops_and_fusion_weights_are_effdets(described, framework):
    """Forward FLOPs of one 256x256 sample: effdet D0's 2.5 G multiply-adds at 512 px (Tan et al. Table 2)
    x (256 / 512)^2, 2 FLOPs each; the 24 BiFPN nodes' fusion weights (2 or 3 inputs) listed as layers."""
    d = described[framework]
    assert d["flops_per_sample"]["forward"] == 1_247_106_560
    fusion = [x["params"]["weights"] for x in d["layers"] if x["kind"] == "fusion"]
    assert fusion == [[2], [2], [2], [2], [3], [3], [3], [2]] * 3


def test_state_differences_are_the_listed_ones(described):
    assert {fw: described[fw]["framework_state"]["non_trainable_state"] for fw in FRAMEWORKS} == \
        listed_smoke_state(MODEL)


def test_same_weights_same_outputs(described):
    """PyTorch's weights, moved through the canonical layout into TensorFlow and MXNet (read back unchanged), give
    the same inference-mode class logits and box outputs on two synthetic images (scaled, padded and normalized
    by each framework)."""
    theirs = np.load(described["pytorch"]["npz"])
    for framework in FRAMEWORKS[1:]:
        ours = np.load(described[framework]["npz"])
        for key in ("class_logits", "box_outputs"):
            scale = float(np.abs(theirs[key]).max())
            np.testing.assert_allclose(ours[key], theirs[key], atol=1e-5 * scale, err_msg=f"{framework} {key}")


EFFDET_LABELS = """
import sys, numpy as np, torch
from effdet import get_efficientdet_config
from effdet.anchors import Anchors, AnchorLabeler
config = get_efficientdet_config("tf_efficientdet_d0")
config.image_size, config.num_classes = (256, 256), 90
anchors = Anchors.from_config(config)
rng = np.random.default_rng(0)
corners, sizes = rng.uniform(0, 200, (6, 2)), rng.uniform(8, 120, (6, 2))
boxes = np.concatenate([corners, corners + sizes], 1).astype(np.float32)
classes = np.array([3, 90, 1, 17, 5, 40])
cls, box, n = AnchorLabeler(anchors, 90, match_threshold=0.5).label_anchors(torch.from_numpy(boxes), torch.from_numpy(classes))
np.savez(sys.argv[1], anchors=anchors.boxes.numpy(), boxes=boxes, classes=classes, n=n.numpy(),
         cls=torch.cat([c.reshape(-1) for c in cls]).numpy(), box=torch.cat([b.reshape(-1, 4) for b in box]).numpy())
"""

OUR_LABELS = """
import sys, numpy as np
from tbdkit.spec import catalog
workload = catalog.load_module(catalog.get("efficientdet"), sys.argv[3])
given = np.load(sys.argv[1])
anchors = workload.anchor_boxes(256)
cls, box, n = workload.label_anchors(anchors, given["boxes"], given["classes"])
np.savez(sys.argv[2], anchors=anchors, cls=cls, box=box, n=n)
"""


@pytest.mark.parametrize("framework", FRAMEWORKS[1:])
def test_anchors_and_targets_are_effdets(tmp_path, framework):
    """tensorflow.py's and mxnet.py's NumPy anchors and target assignment give effdet's own AnchorLabeler's output exactly
    (class targets, matched count; box targets to float32 rounding) on six random boxes at 256 px."""
    theirs, ours = tmp_path / "effdet.npz", tmp_path / "ours.npz"
    run_in_stack("pytorch", "-c", EFFDET_LABELS, str(theirs))
    run_in_stack(framework, "-c", OUR_LABELS, str(theirs), str(ours), framework)
    a, b = np.load(theirs), np.load(ours)
    np.testing.assert_array_equal(b["anchors"], a["anchors"])
    np.testing.assert_array_equal(b["cls"], a["cls"])
    np.testing.assert_allclose(b["box"], a["box"], atol=1e-6)
    assert int(b["n"]) == int(a["n"]) > 6
