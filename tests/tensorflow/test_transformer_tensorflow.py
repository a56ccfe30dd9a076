"""Transformer on TensorFlow: the sizes of workload.toml, causal decoding, padding ignored, PyTorch's
label-smoothed cross-entropy and the paper's schedule; it trains, also under AMP (bfloat16 on CPUs).
Runs in the TensorFlow stack (`make test-tensorflow`)."""

import math

import numpy as np
import pytest
import tensorflow as tf

from model_checks import learned, smoothed_cross_entropy_case, transformer_parameters
from tbdkit.spec import catalog

MODEL = catalog.get("transformer")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_parameter_count_matches_the_hyperparameters(preset):
    hp = MODEL.hp(preset)
    model = WORKLOAD.Transformer(hp)
    assert sum(int(np.prod(w.shape)) for w in model.trainable_weights) == transformer_parameters(hp)
    assert model.project.tied_to is model.embed


def test_decoder_is_causal_and_padding_is_ignored():
    hp = {**MODEL.hp("smoke"), "dropout": 0.0}
    model = WORKLOAD.Transformer(hp)
    batch = next(DATA.batches("synthetic", hp, 4, seed=2))
    x = WORKLOAD.to_device(batch, "/CPU:0")
    logits = model(x["source"], x["source_pad"], x["target_in"], x["target_pad"]).numpy()
    assert logits.shape == (*batch.target_in.shape, hp["target_vocab_size"])
    changed = batch.target_in.copy()
    changed[:, -1] = 5
    later = model(x["source"], x["source_pad"], tf.constant(changed, tf.int32), x["target_pad"]).numpy()
    np.testing.assert_allclose(logits[:, :-1], later[:, :-1], atol=1e-5)
    source = batch.source.copy()
    pad = x["source_pad"].numpy()
    assert pad.any()
    source[pad] = 7
    padded = model(tf.constant(source, tf.int32), x["source_pad"], x["target_in"], x["target_pad"]).numpy()
    keep = ~x["target_pad"].numpy()
    np.testing.assert_allclose(logits[keep], padded[keep], atol=1e-5)


def test_loss_is_pytorchs_label_smoothed_cross_entropy():
    logits, labels, e, expected = smoothed_cross_entropy_case()
    got = WORKLOAD.smoothed_cross_entropy(tf.constant(logits), tf.constant(labels, tf.int32), e)
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_learning_rate_follows_the_inverse_square_root_schedule():
    hp = MODEL.hp("paper")
    schedule = WORKLOAD.InverseSqrt(hp["d_model"], hp["warmup_steps"])
    assert float(schedule(0)) == pytest.approx(512 ** -0.5 * 4000 ** -1.5)
    peak = 512 ** -0.5 * 4000 ** -0.5
    assert float(schedule(3999)) == pytest.approx(peak, rel=1e-5)
    assert float(schedule(15999)) == pytest.approx(peak / 2, rel=1e-5)


def test_smoke_training_reduces_the_loss():
    """The learning check's run (the loss falls: tests/tensorflow/test_every_model_tensorflow.py) starts near uniform."""
    run = learned("transformer", "tensorflow")
    hp, losses = run.hp, run.losses
    assert losses[0] == pytest.approx(math.log(hp["target_vocab_size"]), rel=0.15)  # near uniform at first
