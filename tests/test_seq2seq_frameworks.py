"""Seq2Seq on every framework: its listed differences, and the same synthetic batches in every stack
(tests/test_cross_framework.py compares its frameworks' networks and outputs). Needs every stack (`make test`)."""

from __future__ import annotations

import pytest

from framework_parity import framework_differences, run_in_stack
from tbdkit.spec import catalog

MODEL = catalog.get("seq2seq")
FRAMEWORKS = list(MODEL.frameworks)




def test_framework_differences_are_listed():
    listed = framework_differences("seq2seq")
    assert all("what" in d and set(d) & {"all", "pytorch", "tensorflow", "mxnet"} for d in listed)
    assert any("LSTM" in d["what"] for d in listed)


DIGEST = """
import hashlib, sys
from tbdkit.spec import catalog
model = catalog.get("seq2seq")
data = catalog.load_module(model, "data")
it = data.batches("synthetic", model.hp("smoke"), 4, 7)
h = hashlib.sha256()
for _ in range(3):
    b = next(it)
    for a in (b.source, b.source_lengths, b.target_in, b.target_out, b.target_lengths):
        h.update(a.tobytes())
print(h.hexdigest())
"""


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_the_same_batches_in_every_stack(framework):
    """The synthetic generator gives identical token streams and lengths for the same seed in every
    stack's Python and NumPy (MXNet's stack pins NumPy below 1.24)."""
    assert run_in_stack(framework, "-c", DIGEST).strip() == run_in_stack("pytorch", "-c", DIGEST).strip() != ""
