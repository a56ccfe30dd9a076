"""Deep Speech 2 on MXNet: the network trains, honours the math mode, and its canonical form is right
(MXNet's GRU gate order checked against the reference GRU). Runs in the MXNet stack (`make test-mxnet`)."""

import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from tbdkit.spec import catalog
from tbdkit.adapters.mxnet import MXNetAdapter, Precision
from tbdkit.describe.mxnet import canonical_layers
from tbdkit.describe.canonical import reference_gru
from model_checks import assert_padding_does_not_change_an_utterance

MODEL = catalog.get("deepspeech2")
WORKLOAD = catalog.load_module(MODEL, "mxnet")
DATA = catalog.load_module(MODEL, "data")


def adapter(precision="fp32"):
    return MXNetAdapter(WORKLOAD, MODEL.hp("smoke"), device="cpu", precision=precision, seed=0)


def test_runs_on_numpy_below_1_24():
    assert tuple(int(x) for x in np.__version__.split(".")[:2]) < (1, 24) and mx.__version__ == "1.9.1"


def test_output_shapes_and_lengths():
    a = adapter()
    batch = next(DATA.synthetic_batches(MODEL.hp("smoke"), 3, seed=0))
    inputs = a.prepare(batch)
    logits, lengths = a.training.model(inputs["features"], inputs["frames"])
    t = batch.features.shape[-1]
    assert logits.shape == (math.ceil(t / 2), 3, len(MODEL.hp("smoke")["alphabet"]))
    assert lengths.asnumpy().astype(int).tolist() == [(n - 1) // 2 + 1 for n in batch.feature_lengths.tolist()]


def test_padding_does_not_change_an_utterance(padded_utterance):
    """The backward GRU starts at each utterance's own end (SequenceReverse by length), as PyTorch's
    packed sequences do; MXNet's fused bidirectional GRU would start at the padded end on the CPU."""
    assert_padding_does_not_change_an_utterance(adapter(), WORKLOAD, DATA, MODEL.hp("smoke"), padded_utterance)


def test_sgd_settings_come_from_the_hyperparameters():
    hp, opt = MODEL.hp("smoke"), adapter().training.trainer._optimizer
    assert (opt.learning_rate, opt.momentum, opt.clip_gradient, opt.wd) == (
        hp["learning_rate"], hp["momentum"], hp["clip_gradient_value"], hp["weight_decay"])


def test_math_modes():
    assert Precision("fp32", on_gpu=False).describe()["nvidia_tf32_override"] == "0"
    assert Precision("tf32", on_gpu=False).describe()["nvidia_tf32_override"] is None
    with pytest.raises(RuntimeError, match="needs a GPU.*--precision fp32"):
        Precision("amp", on_gpu=False)
    Precision("fp32", on_gpu=False)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_gru_gate_order_is_canonical(bidirectional):
    gru = gluon.rnn.GRU(5, layout="TNC", input_size=4, bidirectional=bidirectional)
    gru.initialize(mx.init.Normal(1.0))
    x = np.random.default_rng(0).normal(size=(7, 1, 4)).astype(np.float32)
    out = gru(mx.nd.array(x)).asnumpy()
    layers = canonical_layers(gru, lambda: gru(mx.nd.array(x)))
    assert [l.direction for l in layers] == (["forward", "backward"] if bidirectional else [None])
    np.testing.assert_allclose(out[:, 0, :5], reference_gru(x, layers[0].params)[:, 0], atol=1e-5)
    if bidirectional:
        np.testing.assert_allclose(out[:, 0, 5:], reference_gru(x[::-1], layers[1].params)[::-1, 0], atol=1e-5)


def test_oom_and_memory():
    a = adapter()
    assert a.is_oom(mx.base.MXNetError("[12:00:00] src/storage/./pooled_storage_manager.h:161: cudaMalloc retry failed: out of memory"))
    assert a.is_oom(MemoryError())
    assert not a.is_oom(mx.base.MXNetError("shape inconsistent"))
    mem = a.memory()["framework_peak_allocated"]
    assert mem["value"] is None and "CPU" in mem["reason"]
    assert a.environment()["framework_version"] == "1.9.1"
