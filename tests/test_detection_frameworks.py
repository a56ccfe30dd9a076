"""Faster R-CNN and Mask R-CNN have every framework (tests/test_cross_framework.py compares their networks and
outputs; each folder's parity.py and [checks.outputs] hold what it expects)."""

from __future__ import annotations

import pytest

from tbdkit.spec import catalog

FRAMEWORKS = {"faster_rcnn": ("pytorch", "tensorflow", "mxnet"), "mask_rcnn": ("pytorch", "tensorflow", "mxnet")}


@pytest.mark.parametrize("model", list(FRAMEWORKS))
def test_the_frameworks_are_there(model):
    assert catalog.get(model).frameworks == FRAMEWORKS[model]
