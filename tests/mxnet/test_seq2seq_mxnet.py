"""Seq2Seq on MXNet: the network trains, skips padding, takes its sizes and optimizer from the
hyperparameters, and Gluon's LSTM cell is canonical (checked against the NumPy reference LSTM).
Runs in the MXNet stack (`make test-mxnet`)."""

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from tbdkit.spec import catalog
from tbdkit.adapters.mxnet import MXNetAdapter
from tbdkit.describe.mxnet import canonical_layers
from tbdkit.describe.canonical import reference_lstm
from model_checks import assert_padding_does_not_change_a_sentence, assert_translation_outputs

MODEL = catalog.get("seq2seq")
WORKLOAD = catalog.load_module(MODEL, "mxnet")
DATA = catalog.load_module(MODEL, "data")
HP = MODEL.hp("smoke")


def adapter():
    return MXNetAdapter(WORKLOAD, HP, device="cpu", precision="fp32", seed=0)


def test_output_shapes():
    assert_translation_outputs(adapter(), WORKLOAD, DATA, HP)


def test_padding_does_not_change_a_sentence():
    """Junk tokens beyond a sentence's length change nothing: the encoder cells unroll to each
    sentence's length (MXNet's fused LSTM would read the padding on the CPU) and attention is masked."""
    assert_padding_does_not_change_a_sentence(adapter(), WORKLOAD, DATA, HP)


def test_optimizer_comes_from_the_hyperparameters():
    a = adapter()
    opt = a.training.trainer._optimizer
    assert a.training.max_norm == HP["max_gradient_norm"]
    start = int(HP["num_train_steps"] * 2 / 3)
    every = int((HP["num_train_steps"] - start) / 4)
    lr = [opt.lr_scheduler(n + 1) for n in (0, start + every - 1, start + every, start + 4 * every)]  # updates count from 1
    np.testing.assert_allclose(lr, np.array([1, 1, 0.5, 1 / 16]) * HP["learning_rate"])


def test_gradient_norm_is_clipped():
    """With max_gradient_norm far below the gradients' norm, one step moves the weights by exactly
    learning_rate x max_gradient_norm (global norm clipping, then plain SGD)."""
    hp = {**HP, "max_gradient_norm": 0.01}
    a = MXNetAdapter(WORKLOAD, hp, device="cpu", precision="fp32", seed=0)
    params = [p for p in a.training.model.collect_params().values() if p.grad_req != "null"]
    before = [p.data().copy() for p in params]
    a.step(a.prepare(next(DATA.synthetic_batches(hp, 4, seed=1))))
    moved = np.sqrt(sum(float(((p.data() - b) ** 2).sum().asscalar()) for p, b in zip(params, before)))
    assert moved == pytest.approx(hp["learning_rate"] * hp["max_gradient_norm"], rel=1e-3)


def test_initial_weights_follow_init_weight_and_forget_bias():
    a = adapter()
    u, w = HP["num_units"], HP["init_weight"]
    model = a.training.model
    assert model.scale.data().asnumpy().tolist() == [1.0]
    bias = model.cell1.i2h_bias.data().asnumpy()
    assert np.all(np.abs(bias[u : 2 * u] - HP["forget_bias"]) <= w) and np.all(np.abs(bias[:u]) <= w)
    assert np.abs(model.cell1.h2h_bias.data().asnumpy()).max() > 0  # uniform, not Gluon's zeros
    assert np.abs(model.project.weight.data().asnumpy()).max() <= w


def test_lstm_cell_is_canonical():
    cell = gluon.rnn.LSTMCell(5, input_size=4)
    cell.initialize(mx.init.Normal(1.0))
    x = np.random.default_rng(0).normal(size=(7, 1, 4)).astype(np.float32)

    def run():
        return cell.unroll(7, mx.nd.array(x), layout="TNC", merge_outputs=True)

    out, (h, c) = run()
    (layer,) = canonical_layers(cell, run)
    assert layer.kind == "lstm" and layer.positions == 7
    ref, _, ref_c = reference_lstm(x, {k: v.astype(np.float64) for k, v in layer.params.items()})
    np.testing.assert_allclose(out.asnumpy()[:, 0], ref[:, 0], atol=1e-5)
    np.testing.assert_allclose(c.asnumpy(), ref_c, atol=1e-5)


def test_parameters_match_the_hyperparameters():
    u, vs, vt = HP["num_units"], HP["source_vocab_size"], HP["target_vocab_size"]
    lstm = lambda i: 4 * u * (i + u) + 8 * u  # noqa: E731
    expected = (vs + vt) * u + 2 * lstm(u) + 2 * u * u + 1 + lstm(2 * u) + lstm(u) + 3 * u * u + u * vt
    assert adapter().model_info()["parameters"] == expected
