"""Seq2Seq on TensorFlow: the network trains, skips padding, takes its sizes and optimizer from the
hyperparameters, and its LSTM cell is PyTorch's (checked against the canonical NumPy LSTM).
Runs in the TensorFlow stack (`make test-tensorflow`)."""


import numpy as np
import tensorflow as tf

from tbdkit.spec import catalog
from tbdkit.adapters.tensorflow import TensorFlowAdapter
from tbdkit.describe.tensorflow import canonical_layers
from tbdkit.describe.canonical import reference_lstm
from model_checks import assert_padding_does_not_change_a_sentence, assert_translation_outputs, amp_step

MODEL = catalog.get("seq2seq")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")
HP = MODEL.hp("smoke")


def adapter(precision="fp32"):
    return TensorFlowAdapter(WORKLOAD, HP, device="cpu", precision=precision, seed=0)


def test_output_shapes():
    assert_translation_outputs(adapter(), WORKLOAD, DATA, HP)


def test_padding_does_not_change_a_sentence():
    """A sentence padded with junk tokens beyond its length translates the same (masked encoder,
    masked attention), as PyTorch's packed sequences do."""
    assert_padding_does_not_change_a_sentence(adapter(), WORKLOAD, DATA, HP)


def test_optimizer_comes_from_the_hyperparameters():
    opt = adapter().training.optimizer
    assert opt.global_clipnorm == HP["max_gradient_norm"]
    schedule = opt._learning_rate
    start = int(HP["num_train_steps"] * 2 / 3)
    every = int((HP["num_train_steps"] - start) / 4)
    lr = [float(schedule(s)) for s in (0, start + every - 1, start + every, start + 4 * every)]
    np.testing.assert_allclose(lr, np.array([1, 1, 0.5, 1 / 16]) * HP["learning_rate"], rtol=1e-6)


def test_lstm_cell_is_canonical():
    cell = WORKLOAD.LSTMCell(5, 0.5, 1.0)
    rnn = tf.keras.layers.RNN(cell, return_sequences=True, return_state=True)
    x = np.random.default_rng(0).normal(size=(1, 7, 4)).astype(np.float32)
    out, h, c = rnn(x)
    (layer,) = canonical_layers(rnn, lambda: rnn(x))
    assert layer.kind == "lstm" and layer.positions == 7
    ref, ref_h, ref_c = reference_lstm(x.transpose(1, 0, 2), layer.params)
    np.testing.assert_allclose(out.numpy()[0], ref[:, 0], atol=1e-5)
    np.testing.assert_allclose(c.numpy(), ref_c, atol=1e-5)
    forget = layer.params["b_input"][5:10] - 1.0  # forget_bias on the forget block only
    assert np.all(np.abs(forget) <= 0.5) and np.all(np.abs(layer.params["b_input"][:5]) <= 0.5)


def test_parameters_match_the_hyperparameters():
    u, vs, vt = HP["num_units"], HP["source_vocab_size"], HP["target_vocab_size"]
    lstm = lambda i: 4 * u * (i + u) + 8 * u  # noqa: E731  two biases per cell, as PyTorch's
    expected = (vs + vt) * u + 2 * lstm(u) + 2 * u * u + 1 + lstm(2 * u) + lstm(u) + 3 * u * u + u * vt
    assert adapter().model_info()["parameters"] == expected


def test_amp_computes_in_bfloat16_on_cpu():
    """The amp step of check-workload's math-mode check (its batch; the loss finite) ran in bfloat16."""
    a, _ = amp_step("seq2seq")
    assert a.training.model.project.compute_dtype == "bfloat16"
