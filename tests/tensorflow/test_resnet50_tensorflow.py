"""ResNet-50 on TensorFlow: torchvision's v1.5 network, hyperparameters from workload.toml, a smoke
step that learns. Runs in the TensorFlow stack (`make test-tensorflow`); parity with the other
frameworks is tests/test_vision_frameworks.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tbdkit.spec import catalog
from model_checks import kept_learning_run

MODEL = catalog.get("resnet50")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")
# the learning check's network (smoke preset; its steps on a fixed batch), built and traced once for the unit
run = kept_learning_run("resnet50", "tensorflow")


def test_parameter_count_is_torchvisions(run):
    info = run.trained.model_info()
    assert info["non_trainable_state"] == 53_120  # moving mean and variance of 53 batch-norm layers


def test_v1_5_strides_in_the_3x3_convolution(run):
    block = run.trained.training.model.blocks[3]  # the first block of the second stage
    convs = [layer for layer in block.residual if isinstance(layer, keras.layers.Conv2D)]
    assert [c.kernel_size for c in convs] == [(1, 1), (3, 3), (1, 1)]
    assert [c.strides for c in convs] == [(1, 1), (2, 2), (1, 1)]


def test_channels_last_batches_hold_the_same_pixels():
    batch = next(DATA.synthetic_batches(MODEL.hp("smoke"), 2, seed=0))
    inputs = WORKLOAD.to_device(batch, "/CPU:0")
    np.testing.assert_array_equal(inputs["images"].numpy(), batch.images.transpose(0, 2, 3, 1))
    assert inputs["labels"].dtype == tf.int64


def test_sgd_and_coupled_weight_decay_come_from_the_hyperparameters(run):
    hp = MODEL.hp("smoke")
    opt = run.trained.training.optimizer
    assert float(opt.learning_rate) == pytest.approx(hp["learning_rate"], rel=1e-6)  # a float32 variable
    assert float(opt.momentum) == hp["momentum"]
    w = tf.Variable([[1.0, -2.0], [3.0, 0.5]])
    with tf.GradientTape() as tape:
        penalty = WORKLOAD.l2_penalty([w], hp["weight_decay"])
    np.testing.assert_allclose(tape.gradient(penalty, w).numpy(), hp["weight_decay"] * w.numpy(), rtol=1e-6)


def test_optimizer_state_is_one_momentum_buffer_per_weight(run):
    """memory.json's `dynamic` on TensorFlow: SGD with momentum keeps a buffer the size of each trainable
    variable, plus its scalar counters (iterations, learning rate), after the learning check's steps."""
    a = run.trained
    assert int(a.training.optimizer.iterations) == len(run.losses) > 0
    weights = a.model_info()["parameter_bytes"]
    assert weights <= a.optimizer_state_bytes() <= weights + 64
