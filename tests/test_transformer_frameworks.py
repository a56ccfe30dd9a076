"""The Transformer on every framework it has, side by side: the same network (parity of `tbdkit
describe`: the same parameters in the same canonical layers, the same FLOPs per sentence pair) and,
with PyTorch's weights moved through the canonical layout, the same outputs. Needs every stack
(`make test` sets them up)."""

from __future__ import annotations

import itertools

import pytest

from framework_parity import (assert_same_network, assert_same_sequence_files, assert_smoke_flops,
                              described_with_pytorch_weights, framework_differences)
from tbdkit.spec import catalog

MODEL = catalog.get("transformer")
FRAMEWORKS = list(MODEL.frameworks)


@pytest.fixture(scope="module")
def described(tmp_path_factory) -> dict[str, dict]:
    """The Transformer described in each framework, PyTorch's weights saved and loaded into the others."""
    return described_with_pytorch_weights("transformer", FRAMEWORKS, tmp_path_factory.mktemp("transformer"))


def expected_forward_flops(hp) -> int:
    """Forward FLOPs of the reference sentence pair from the hyperparameters alone: 2 per multiply-
    accumulate of every weight product (q, k, v, output and feed-forward dense layers; the tied
    pre-softmax projection); attention's scores and contexts hold no weights and are not counted."""
    d, f, v = hp["d_model"], hp["ffn_hidden"], hp["target_vocab_size"]
    s = round(hp["length_mean"])
    t = round(s * hp["target_length_ratio"]) + 1  # decoder positions: <s> y
    encoder = hp["encoder_layers"] * s * (4 * d * d + 2 * d * f)
    decoder = hp["decoder_layers"] * (t * 4 * d * d + t * 2 * d * d + s * 2 * d * d + t * 2 * d * f)
    return 2 * (encoder + decoder + t * d * v)


@pytest.mark.parametrize("a, b", list(itertools.combinations(FRAMEWORKS, 2)))
def test_the_same_network_on_each_pair(described, a, b):
    assert_same_network(described[a], described[b], also=("tied",))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_flops_match_the_hyperparameters(described, framework):
    assert_smoke_flops(described[framework]["flops_per_sample"], expected_forward_flops(MODEL.hp("smoke")), rel=0)


def test_layer_order_is_canonical(described):
    """Per encoder layer: q, k, v, out, norm1, ffn 1 and 2, norm2; per decoder layer self-attention,
    norm1, cross-attention, norm2, ffn, norm3; the projection tied to the one embedding table last."""
    hp = MODEL.hp("smoke")
    kinds = [x["kind"] for x in described["pytorch"]["layers"]]
    encoder = ["dense"] * 4 + ["layernorm"] + ["dense"] * 2 + ["layernorm"]
    decoder = ["dense"] * 4 + ["layernorm"] + ["dense"] * 4 + ["layernorm"] + ["dense"] * 2 + ["layernorm"]
    assert kinds == ["embedding"] + encoder * hp["encoder_layers"] + decoder * hp["decoder_layers"] + ["dense"]
    assert described["pytorch"]["layers"][-1]["tied"] == {"weight": [hp["target_vocab_size"], hp["d_model"]]}


def test_framework_differences_are_listed():
    listed = framework_differences("transformer")
    assert all("what" in d and set(d) & {"all", "pytorch", "tensorflow", "mxnet"} for d in listed)
    assert any("attention" in d["what"] for d in listed)


@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f != "pytorch"])
def test_same_weights_same_outputs(described, framework):
    """PyTorch's weights, moved through the canonical layout (q, k and v cut from its packed in_proj; read
    back unchanged), give the same log-probabilities on the same two sentence pairs: the same network, numerically."""
    assert_same_sequence_files(described["pytorch"]["npz"], described[framework]["npz"])
