"""The Transformer on every framework, and its listed differences (tests/test_cross_framework.py compares its
frameworks' networks and outputs)."""

from __future__ import annotations

from framework_parity import framework_differences
from tbdkit.spec import catalog

MODEL = catalog.get("transformer")
FRAMEWORKS = list(MODEL.frameworks)




def test_framework_differences_are_listed():
    listed = framework_differences("transformer")
    assert all("what" in d and set(d) & {"all", "pytorch", "tensorflow", "mxnet"} for d in listed)
    assert any("attention" in d["what"] for d in listed)
