"""Seq2Seq on every framework, side by side: the same network (parity of `tbdkit describe`: the
same parameters in the same canonical layers, the same FLOPs per sentence) and, with PyTorch's
weights moved through the canonical layout, the same outputs. Needs every stack (`make test`)."""

from __future__ import annotations

import itertools

import pytest

from framework_parity import (assert_same_network, assert_same_sequence_files, assert_smoke_flops,
                              described_with_pytorch_weights, framework_differences, run_in_stack)
from tbdkit.spec import catalog

MODEL = catalog.get("seq2seq")
FRAMEWORKS = list(MODEL.frameworks)


@pytest.fixture(scope="module")
def described(tmp_path_factory) -> dict[str, dict]:
    """Seq2Seq described in each framework, PyTorch's weights saved and loaded into the others."""
    return described_with_pytorch_weights("seq2seq", FRAMEWORKS, tmp_path_factory.mktemp("seq2seq"))


def expected_forward_flops(hp) -> int:
    """Forward FLOPs of the reference sentence pair from the hyperparameters alone (2 per multiply-
    accumulate of the weight products; attention scores and contexts hold no weights, not counted)."""
    u, s = hp["num_units"], round(hp["length_mean"])
    t = round(s * hp["target_length_ratio"]) + 1  # decoder steps: <s> y (labels y </s>)
    encoder = 2 * s * (4 * u * u + 4 * u * u)                      # two directions, input u
    keys = s * 2 * u * u                                            # memory layer
    decoder = t * ((4 * u * 2 * u + 4 * u * u) + (4 * u * u + 4 * u * u) + 3 * u * u + u * hp["target_vocab_size"])
    return 2 * (encoder + keys + decoder)


@pytest.mark.parametrize("a, b", list(itertools.combinations(FRAMEWORKS, 2)))
def test_the_same_network_on_each_pair(described, a, b):
    assert_same_network(described[a], described[b])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_flops_match_the_hyperparameters(described, framework):
    assert_smoke_flops(described[framework]["flops_per_sample"], expected_forward_flops(MODEL.hp("smoke")))


def test_layer_order_is_canonical(described):
    assert [x["name"] for x in described["pytorch"]["layers"]] == [
        "embedding1", "lstm1.forward", "lstm1.backward", "dense1", "embedding2", "lstm2", "lstm3", "dense2",
        "dense3", "scale1"]


def test_framework_differences_are_listed():
    listed = framework_differences("seq2seq")
    assert all("what" in d and set(d) & {"all", "pytorch", "tensorflow", "mxnet"} for d in listed)
    assert any("LSTM" in d["what"] for d in listed)


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_same_weights_same_outputs(described, framework):
    """PyTorch's weights, moved through the canonical layout into the other framework (read back unchanged),
    give the same log-probabilities on the same two sentence pairs: the same network, numerically."""
    assert_same_sequence_files(described["pytorch"]["npz"], described[framework]["npz"])


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
