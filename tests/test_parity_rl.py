"""A3C, MiniGo and BERT have every framework (tests/test_cross_framework.py compares their networks and outputs;
each folder's parity.py and [checks.outputs] hold what it expects)."""

from __future__ import annotations

import pytest

from tbdkit.spec import catalog

MODELS = ["a3c", "minigo", "bert"]
FRAMEWORKS = ["pytorch", "tensorflow", "mxnet"]


@pytest.mark.parametrize("model", MODELS)
def test_every_framework_is_there(model):
    assert list(catalog.get(model).frameworks) == FRAMEWORKS
