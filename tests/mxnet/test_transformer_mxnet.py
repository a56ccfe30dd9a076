"""Transformer on MXNet: the sizes of workload.toml, causal decoding, padding ignored, PyTorch's
label-smoothed cross-entropy and the paper's schedule; it trains. Runs in the MXNet stack
(`make test-mxnet`)."""

import math

import mxnet as mx
import numpy as np
import pytest

from model_checks import learned, smoothed_cross_entropy_case, transformer_parameters
from tbdkit.spec import catalog

MODEL = catalog.get("transformer")
WORKLOAD = catalog.load_module(MODEL, "mxnet")
DATA = catalog.load_module(MODEL, "data")
CPU = mx.cpu()


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_parameter_count_matches_the_hyperparameters(preset):
    hp = MODEL.hp(preset)
    training = WORKLOAD.build(hp, CPU)
    params = training.model.collect_params().values()
    assert sum(int(np.prod(p.shape)) for p in params if p.grad_req != "null") == transformer_parameters(hp)
    assert training.model.project.weight is training.model.embed.weight


def test_decoder_is_causal_and_padding_is_ignored():
    hp = {**MODEL.hp("smoke"), "dropout": 0.0}
    model = WORKLOAD.build(hp, CPU).model
    batch = next(DATA.batches("synthetic", hp, 4, seed=2))
    x = WORKLOAD.to_device(batch, CPU)
    logits = model(x["source"], x["source_pad"], x["target_in"], x["target_pad"]).asnumpy()
    assert logits.shape == (*batch.target_in.shape, hp["target_vocab_size"])
    changed = batch.target_in.copy()
    changed[:, -1] = 5
    later = model(x["source"], x["source_pad"], mx.nd.array(changed), x["target_pad"]).asnumpy()
    np.testing.assert_allclose(logits[:, :-1], later[:, :-1], atol=1e-5)
    pad = x["source_pad"].asnumpy().astype(bool)
    assert pad.any()
    source = batch.source.copy()
    source[pad] = 7
    padded = model(mx.nd.array(source), x["source_pad"], x["target_in"], x["target_pad"]).asnumpy()
    keep = ~x["target_pad"].asnumpy().astype(bool)
    np.testing.assert_allclose(logits[keep], padded[keep], atol=1e-5)


def test_loss_is_pytorchs_label_smoothed_cross_entropy():
    logits, labels, e, expected = smoothed_cross_entropy_case()
    got = WORKLOAD.smoothed_cross_entropy(mx.nd.array(logits), mx.nd.array(labels), e)
    assert float(got.asscalar()) == pytest.approx(expected, rel=1e-5)


def test_learning_rate_follows_the_inverse_square_root_schedule():
    hp = MODEL.hp("paper")
    assert WORKLOAD.learning_rate(hp, 0) == pytest.approx(512 ** -0.5 * 4000 ** -1.5)
    peak = 512 ** -0.5 * 4000 ** -0.5
    assert WORKLOAD.learning_rate(hp, 3999) == pytest.approx(peak)
    assert WORKLOAD.learning_rate(hp, 15999) == pytest.approx(peak / 2)


def test_smoke_training_reduces_the_loss():
    """The learning check's run (the loss falls: tests/mxnet/test_every_model_mxnet.py) starts near uniform."""
    run = learned("transformer", "mxnet")
    hp, losses = run.hp, run.losses
    assert losses[0] == pytest.approx(math.log(hp["target_vocab_size"]), rel=0.15)  # near uniform at first
