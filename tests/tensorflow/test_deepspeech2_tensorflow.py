"""Deep Speech 2 on TensorFlow: the network trains, honours the math mode, and its canonical form is
right (Keras' gate order z, r, h converted to r, z, n). Runs in the TensorFlow stack (`make test-tensorflow`)."""

import math

import keras
import numpy as np
import tensorflow as tf

from tbdkit.spec import catalog
from tbdkit.adapters.tensorflow import Precision
from tbdkit.describe.tensorflow import canonical_layers
from tbdkit.describe.canonical import reference_gru
from model_checks import amp_step, assert_padding_does_not_change_an_utterance, kept_learning_run

MODEL = catalog.get("deepspeech2")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")


# the learning check's smoke network (its steps on a fixed batch), which the generated tests build anyway: shapes,
# masking, clipping and the OOM and memory answers hold for its trained weights as for new ones
run = kept_learning_run("deepspeech2", "tensorflow")


def test_output_shapes_and_lengths(run):
    a = run.trained
    batch = next(DATA.synthetic_batches(MODEL.hp("smoke"), 3, seed=0))
    inputs = a.prepare(batch)
    log_probs, lengths = a.training.model(inputs["features"], inputs["frames"])
    t = batch.features.shape[-1]
    assert log_probs.shape == (3, math.ceil(t / 2), len(MODEL.hp("smoke")["alphabet"]))
    np.testing.assert_allclose(np.exp(log_probs.numpy()).sum(-1), 1.0, atol=1e-4)
    assert lengths.numpy().tolist() == [(n - 1) // 2 + 1 for n in batch.feature_lengths.tolist()]


def test_padding_does_not_change_an_utterance(run, padded_utterance):
    """The backward GRU starts at each utterance's own end (masking), as PyTorch's packed sequences do."""
    assert_padding_does_not_change_an_utterance(run.trained, WORKLOAD, DATA, MODEL.hp("smoke"), padded_utterance)


def test_gradient_values_are_clipped(run):
    assert run.trained.training.optimizer.clipvalue == MODEL.hp("smoke")["clip_gradient_value"]


def test_math_modes():
    assert Precision("fp32", on_gpu=False).describe()["tf32_matmul"] is False
    assert Precision("tf32", on_gpu=False).describe()["tf32_matmul"] is True
    amp = Precision("amp", on_gpu=False).describe()
    assert amp["keras_dtype_policy"] == "mixed_bfloat16" and amp["loss_scaling"] is False
    assert Precision("amp", on_gpu=True).wrap_optimizer(keras.optimizers.SGD()).__class__.__name__ == "LossScaleOptimizer"
    Precision("fp32", on_gpu=False)


def test_amp_computes_in_bfloat16_on_cpu():
    """The amp step of check-workload's math-mode check (its batch; the loss finite) ran in bfloat16."""
    a, _ = amp_step("deepspeech2")
    assert a.training.model.fc.compute_dtype == "bfloat16"


def test_gru_gate_order_is_canonicalized():
    gru = keras.layers.GRU(5, return_sequences=True, reset_after=True)
    layer = keras.layers.Bidirectional(gru)
    model = keras.Sequential([keras.Input((7, 4)), layer])
    x = np.random.default_rng(0).normal(size=(1, 7, 4)).astype(np.float32)
    for w in model.weights:
        w.assign(np.random.default_rng(1).normal(size=w.shape))
    out = model(x).numpy()
    layers = canonical_layers(model, lambda: model(x))
    assert [l.direction for l in layers] == ["forward", "backward"]
    np.testing.assert_allclose(out[0, :, :5], reference_gru(x.transpose(1, 0, 2), layers[0].params)[:, 0], atol=1e-5)
    backward = reference_gru(x[:, ::-1].transpose(1, 0, 2), layers[1].params)[::-1, 0]
    np.testing.assert_allclose(out[0, :, 5:], backward, atol=1e-5)


def test_oom_and_memory(run):
    a = run.trained
    assert a.is_oom(tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[4,1760]"))
    assert a.is_oom(MemoryError())
    assert not a.is_oom(ValueError("shape mismatch"))
    mem = a.memory()["framework_peak_allocated"]
    assert mem["value"] is None and "CPU" in mem["reason"]
    env = a.environment()
    assert env["framework_version"] == "2.21.0" and env["device"] == "cpu" and "cudnn" in env
