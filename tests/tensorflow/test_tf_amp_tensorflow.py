"""workloads/_shared/tf_amp.py: the loss-scaling update every TensorFlow workload ends its step with,
through Keras' real LossScaleOptimizer (what the adapter wraps the optimizer in under AMP on a GPU;
float16 runs on the CPU too, only the hardware differs)."""

import keras
import pytest
import tensorflow as tf

from tbdkit.spec import catalog

catalog.workloads_on_path()
from _shared.tf_amp import scaled_update  # noqa: E402

TINY = 2.0 ** -13  # float16 holds it, but not its square: 2^-26 is below float16's smallest subnormal, 2^-24


def one_update(optimizer: keras.optimizers.Optimizer) -> float:
    """w (float32, 0) after one compiled step on the float16 loss w x TINY x TINY, whose gradient is 2^-26."""
    w = tf.Variable(0.0)

    @tf.function
    def step() -> None:
        with tf.GradientTape() as tape:
            loss = tf.cast(w, tf.float16) * tf.constant(TINY, tf.float16) * tf.constant(TINY, tf.float16)
        scaled_update(tape, loss, optimizer, [w])

    step()
    return float(w.numpy())


def test_the_scaled_gradient_survives_float16_and_is_unscaled_before_the_update():
    """Under a LossScaleOptimizer the scaling is on the tape (2^15 x 2^-26 = 2^-11 is a float16 number)
    and apply() divides it out again: w moves by exactly -lr x 2^-26."""
    assert one_update(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=1.0))) == -(2.0 ** -26)


def test_without_loss_scaling_it_is_the_plain_update():
    """A bare optimizer: scale_loss is the identity, the float16 gradient flushes to zero, w stays put,
    which is why AMP on a GPU scales."""
    assert one_update(keras.optimizers.SGD(learning_rate=1.0)) == 0.0


def test_a_plain_float32_step_is_gradient_descent():
    w = tf.Variable([1.0, -2.0])
    optimizer = keras.optimizers.SGD(learning_rate=0.5)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(w))
    scaled_update(tape, loss, optimizer, [w])
    assert w.numpy().tolist() == pytest.approx([0.0, 0.0])
