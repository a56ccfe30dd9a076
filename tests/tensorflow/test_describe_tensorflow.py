"""`describe`'s quicker Keras build (tbdkit.describe.tensorflow.building): custom layers without a build() of their
own, called eagerly, are built by that call instead of a symbolic trace first, and the same weights come out (names,
order, values); a first call inside a tf.function is traced as before. Runs in the TensorFlow stack."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import backend
from keras.src.layers import layer as keras_layer

from tbdkit.describe.tensorflow import building


class Pair(keras.layers.Layer):
    """A layer without build(): two sublayers, one taking a list of tensors."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense, self.join = keras.layers.Dense(3), Join()

    def call(self, x):
        return self.join([self.dense(x), x[:, :3]])


class Join(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.scale = keras.layers.Dense(3, use_bias=False)

    def call(self, xs):
        return self.scale(xs[0] + xs[1])


class Net(keras.Model):
    def __init__(self):
        super().__init__(name="net")
        self.first, self.second = Pair(), Pair()

    def call(self, x):
        return self.second(tf.concat([self.first(x), x[:, 3:]], axis=-1))


@pytest.fixture
def traces(monkeypatch):
    """How many symbolic traces Keras runs to build layers."""
    count = [0]
    original = backend.compute_output_spec

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(backend, "compute_output_spec", counted)
    return count


def built(first_call):
    keras.backend.clear_session()  # the layers' names counted from scratch, as in describe's own process
    keras.utils.set_random_seed(0)
    net = Net()
    first_call(net)
    return net


def test_the_same_weights_without_a_trace(traces):
    def eagerly(net):
        net(tf.zeros((2, 5)))

    plain = built(eagerly)
    assert traces[0] > 0  # Keras traces the layers without build() to build them
    traces[0] = 0
    original = keras_layer.Layer._maybe_build
    with building():
        quick = built(eagerly)
    assert traces[0] == 0 and keras_layer.Layer._maybe_build is original
    assert [w.path for w in quick.weights] == [w.path for w in plain.weights] and len(plain.weights) == 6
    for a, b in zip(plain.weights, quick.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    x = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    np.testing.assert_array_equal(quick(x).numpy(), plain(x).numpy())
    assert quick.built and all(layer.built for layer in quick._flatten_layers())


def test_a_first_call_in_a_tf_function_is_traced_as_before(traces):
    with building():
        built(lambda net: tf.function(net)(tf.zeros((2, 5))))
    assert traces[0] > 0
