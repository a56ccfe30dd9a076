"""EfficientDet-D0 on every framework it has, and its NumPy anchors and targets against effdet's own
(tests/test_cross_framework.py compares its frameworks' networks and outputs). Needs the stacks installed."""

from __future__ import annotations

import numpy as np
import pytest

from framework_parity import run_in_stack

MODEL = "efficientdet"
FRAMEWORKS = ("pytorch", "tensorflow", "mxnet")




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
