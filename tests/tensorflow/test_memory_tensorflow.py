"""TensorFlow's memory breakdown on networks small enough to count by hand (CPU, real TensorFlow and
Keras). Runs in the TensorFlow stack."""

from types import SimpleNamespace

import keras
import numpy as np
import tensorflow as tf

from tbdkit.adapters.tensorflow_memory import breakdown


def training(model: keras.Model, inputs: tf.Tensor, loss_scale: bool = False) -> SimpleNamespace:
    optimizer = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    if loss_scale:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(inputs, training=True))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    step()  # traced and run once, as the sample window leaves it
    weights = sum(int(np.prod(w.shape)) * 4 for w in model.trainable_weights)
    return SimpleNamespace(model=model, optimizer=optimizer, step=step, weights=weights)


def state_of(opt) -> int:
    return sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in opt.variables)


def test_dense_gradients_are_measured_one_per_variable():
    keras.utils.set_random_seed(0)
    t = training(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)]),
                 tf.ones((5, 4)))
    got = breakdown(t.weights, [t.optimizer], lambda: state_of(t.optimizer), None, t.step)
    cats = got["categories"]
    assert cats["weights"]["bytes"] == (4 * 3 + 3 + 3 * 2 + 2) * 4
    assert cats["weight_gradients"]["bytes"] == cats["weights"]["bytes"]   # dense: one float per weight
    assert cats["feature_maps"]["bytes"] is None and "CPU" in cats["feature_maps"]["reason"]
    assert cats["workspace"]["bytes"] is None and got["peak"]["bytes"] is None
    assert cats["dynamic"]["bytes"] == state_of(t.optimizer)
    assert not tf.config.functions_run_eagerly()
    assert "apply" not in vars(t.optimizer)   # the probe is gone


def test_sparse_gradients_are_their_values_and_indices_not_the_table():
    """An embedding table of 1000 x 8 floats looked up at 12 positions: its gradient is an
    IndexedSlices of 12 x 8 floats and 12 indices, not a copy of the table's 32,000 bytes."""
    keras.utils.set_random_seed(0)
    ids = tf.constant(np.arange(12).reshape(4, 3) * 7, tf.int32)
    model = keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(1000, 8),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    t = training(model, ids)
    cats = breakdown(t.weights, [t.optimizer], lambda: state_of(t.optimizer), None, t.step)["categories"]
    dense = (8 * 1 + 1) * 4
    assert cats["weights"]["bytes"] == 1000 * 8 * 4 + dense
    index_bytes = cats["weight_gradients"]["bytes"] - dense - 12 * 8 * 4
    assert index_bytes in (12 * 4, 12 * 8)    # int32 or int64 indices, as TensorFlow chose them


def test_a_loss_scale_wrapper_and_its_inner_optimizer_count_each_gradient_once():
    keras.utils.set_random_seed(0)
    t = training(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]), tf.ones((2, 4)), loss_scale=True)
    cats = breakdown(t.weights, [t.optimizer], lambda: state_of(t.optimizer), None, t.step)["categories"]
    assert cats["weight_gradients"]["bytes"] == (4 * 3 + 3) * 4


def test_the_tensorflow_adapter_has_the_core_and_its_capabilities() -> None:
    from model_checks import assert_capabilities

    assert_capabilities("tensorflow", {"graph_compile", "memory_breakdown", "optimizer_state", "parameter_sync", "peak_reset",
                                       "replicas"})
