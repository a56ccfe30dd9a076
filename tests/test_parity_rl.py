"""A3C, MiniGo and BERT on every framework, side by side: the same network
(parity of `tbdkit describe`: parameter count, per-layer shapes in canonical order, FLOPs per
sample), the same outputs for the same weights and the listed state differences (each is benched through the
whole kit by tests/test_every_cell_benches.py). Needs every stack installed (`make test` sets them up)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from framework_parity import (assert_same_network, assert_smoke_flops, described_with_pytorch_weights,
                              framework_differences)
from tbdkit.spec import catalog

MODELS = ["a3c", "minigo", "bert"]
FRAMEWORKS = ["pytorch", "tensorflow", "mxnet"]
PAIRS = [(m, a, b) for m in MODELS for a, b in itertools.combinations(FRAMEWORKS, 2)]


@pytest.fixture(scope="module")
def described(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """Each model described in each framework, PyTorch's weights saved and loaded into the others."""
    return {(model, fw): d for model in MODELS
            for fw, d in described_with_pytorch_weights(model, FRAMEWORKS, tmp_path_factory.mktemp(model)).items()}


def expected_forward_flops(model: str, hp: dict) -> int:
    """Forward FLOPs of one reference sample from the hyperparameters alone (2 per multiply-accumulate)."""
    if model == "a3c":
        def out(n, k, s):
            return (n - k) // s + 1
        h1, w1 = out(hp["frame_height"], hp["conv1_kernel"], hp["conv1_stride"]), out(
            hp["frame_width"], hp["conv1_kernel"], hp["conv1_stride"])
        h2, w2 = out(h1, hp["conv2_kernel"], hp["conv2_stride"]), out(w1, hp["conv2_kernel"], hp["conv2_stride"])
        macs = hp["conv1_channels"] * hp["frame_stack"] * hp["conv1_kernel"] ** 2 * h1 * w1
        macs += hp["conv2_channels"] * hp["conv1_channels"] * hp["conv2_kernel"] ** 2 * h2 * w2
        macs += hp["conv2_channels"] * h2 * w2 * hp["hidden"] + hp["hidden"] * (hp["actions"] + 1)
        return 2 * macs
    if model == "minigo":
        n, w, planes = hp["board_size"], hp["conv_width"], 2 * hp["history"] + 1
        pw, vw, fc = hp["policy_conv_width"], hp["value_conv_width"], hp["fc_width"]
        macs = n * n * (planes * w * 9 + hp["trunk_layers"] * 2 * w * w * 9 + w * (pw + vw))
        macs += pw * n * n * (n * n + 1) + vw * n * n * fc + fc
        return 2 * macs
    if model == "bert":  # every dense layer at every position; pooler and next sentence once per sequence
        h, i, v, s = hp["hidden_size"], hp["intermediate_size"], hp["vocab_size"], hp["seq_len"]
        macs = s * hp["num_hidden_layers"] * (4 * h * h + 2 * h * i) + h * h + s * (h * h + h * v) + 2 * h
        return 2 * macs
    raise AssertionError(f"no FLOP formula for {model}")


@pytest.mark.parametrize("model, a, b", PAIRS)
def test_the_same_network_on_each_pair(described, model, a, b):
    assert_same_network(described[model, a], described[model, b])


@pytest.mark.parametrize("model, framework", [(m, f) for m in MODELS for f in FRAMEWORKS])
def test_flops_match_the_hyperparameters(described, model, framework):
    assert_smoke_flops(described[model, framework]["flops_per_sample"],
                       expected_forward_flops(model, catalog.get(model).hp("smoke")))


def test_a3c_layer_order_is_canonical(described):
    for fw in FRAMEWORKS:
        assert [x["name"] for x in described["a3c", fw]["layers"]] == ["conv1", "conv2", "dense1", "dense2", "dense3"]
    assert described["a3c", "pytorch"]["parameters"] == 677_943


def test_minigo_layer_order_is_canonical(described):
    names = ["conv1", "bn1"] + [f"{k}{i}" for i in range(2, 20) for k in ("conv", "bn")]
    names += ["conv20", "bn20", "dense1", "conv21", "bn21", "dense2", "dense3"]
    for fw in FRAMEWORKS:
        layers = described["minigo", fw]["layers"]
        assert [x["name"] for x in layers] == names
        assert layers[-6]["params"] == {} and layers[-3]["params"] == {}  # the heads' batch norms: no scale/offset


def test_bert_decoder_is_tied_to_the_word_embeddings(described):
    for fw in FRAMEWORKS:
        layers = described["bert", fw]["layers"]
        assert [x["kind"] for x in layers[:4]] == ["embedding"] * 3 + ["layernorm"]
        assert layers[-2]["params"] == {"bias": [2000]} and layers[-2]["tied"] == {"weight": [2000, 64]}


@pytest.mark.parametrize("model", MODELS)
def test_state_differences_are_the_listed_ones(described, model):
    """Non-trainable state per framework is what workload.toml says (`smoke_state_values`), or none."""
    entries = [d["smoke_state_values"] for d in framework_differences(model) if "smoke_state_values" in d]
    expected = entries[0] if entries else dict.fromkeys(FRAMEWORKS, 0)
    assert {fw: described[model, fw]["framework_state"]["non_trainable_state"] for fw in FRAMEWORKS} == expected


@pytest.mark.parametrize("model, framework", [(m, f) for m in MODELS for f in FRAMEWORKS[1:]])
def test_same_weights_same_outputs(described, model, framework):
    """PyTorch's weights, moved through the canonical layout into the other framework (read back unchanged),
    give the same outputs on the same probe batch: the same network, numerically."""
    theirs, ours = np.load(described[model, "pytorch"]["npz"]), np.load(described[model, framework]["npz"])
    assert ours.files == theirs.files
    for key in (k for k in theirs.files if "/" not in k):  # the network's outputs on the probe batch
        np.testing.assert_allclose(ours[key], theirs[key], atol=1e-4, rtol=1e-4, err_msg=key)
