"""MiniGo on TensorFlow 2 / Keras 3: the residual policy/value network of minigo's dual_net.py,
SGD with momentum and L2 on the kernels, and one training step on a batch of positions.

The same network as pytorch.py, from the same hyperparameters (workload.toml). Convolutions run
channels-last (TensorFlow's CPU kernels need NHWC); the heads flatten in channels-first order, as
in the other frameworks, so their dense weights mean the same thing. Nothing here times, logs or
profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from _shared.tf_amp import built, scaled_update


def _conv_bn(hp: dict[str, Any], width: int, kernel: int, affine: bool = True) -> list[keras.layers.Layer]:
    """A bias-free convolution and batch norm (Keras momentum = dual_net's decay; PyTorch's is 1 - it)."""
    return [keras.layers.Conv2D(width, kernel, padding="same", use_bias=False),
            keras.layers.BatchNormalization(momentum=hp["batchnorm_momentum"], epsilon=hp["batchnorm_epsilon"],
                                            center=affine, scale=affine)]


def _run(layers: list[keras.layers.Layer], x: tf.Tensor, training: bool) -> tf.Tensor:
    for layer in layers:
        x = layer(x, training=training)
    return x


def _flatten_channels_first(x: tf.Tensor) -> tf.Tensor:
    return tf.reshape(tf.transpose(x, (0, 3, 1, 2)), (tf.shape(x)[0], -1))


class DualNet(keras.Model):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="minigo")
        n, w = hp["board_size"], hp["conv_width"]
        self.planes, self.size = 2 * hp["history"] + 1, n
        self.stem = _conv_bn(hp, w, 3)
        self.blocks = [_conv_bn(hp, w, 3) + _conv_bn(hp, w, 3) for _ in range(hp["trunk_layers"])]
        self.policy_conv = _conv_bn(hp, hp["policy_conv_width"], 1, affine=False)
        self.policy_fc = keras.layers.Dense(n * n + 1)
        self.value_conv = _conv_bn(hp, hp["value_conv_width"], 1, affine=False)
        self.value_fc = keras.layers.Dense(hp["fc_width"], activation="relu")
        self.value_out = keras.layers.Dense(1, activation="tanh")
        self.build((None, self.planes, n, n))

    def build(self, input_shape: Any) -> None:
        n = self.size
        shape: tuple[Any, ...] = (None, n, n, self.planes)
        for layer in self.stem + [x for block in self.blocks for x in block]:
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
        for conv, fc in ((self.policy_conv, self.policy_fc), (self.value_conv, self.value_fc)):
            conv[0].build(shape)
            conv[1].build((None, n, n, conv[0].filters))
            fc.build((None, conv[0].filters * n * n))
        self.value_out.build((None, self.value_fc.units))
        self.built = True

    def call(self, planes: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """Planes (N, 17, n, n) -> policy logits (N, n*n + 1), values (N,) in [-1, 1], in float32."""
        x = tf.cast(tf.transpose(planes, (0, 2, 3, 1)), self.compute_dtype)       # channels last
        x = tf.nn.relu(_run(self.stem, x, training))
        for block in self.blocks:
            y = tf.nn.relu(_run(block[:2], x, training))
            x = tf.nn.relu(x + _run(block[2:], y, training))
        policy = self.policy_fc(_flatten_channels_first(tf.nn.relu(_run(self.policy_conv, x, training))))
        value = self.value_out(self.value_fc(_flatten_channels_first(tf.nn.relu(_run(self.value_conv, x, training)))))
        return tf.cast(policy, tf.float32), tf.cast(value[:, 0], tf.float32)


def schedule(boundaries: list[int], rates: list[float]) -> keras.optimizers.schedules.LearningRateSchedule:
    """rates[i] once the step >= boundaries[i - 1], as PyTorch's LambdaLR: Keras' PiecewiseConstantDecay
    switches after a boundary (step > b), hence b - 1."""
    return keras.optimizers.schedules.PiecewiseConstantDecay([b - 1 for b in boundaries], list(rates))


def l2_penalty(model: DualNet) -> tf.Tensor:
    """Sum of squared conv and dense kernels (dual_net's l2 regularizer; biases and batch norm excluded)."""
    kernels = [layer.kernel for layer in model._flatten_layers(include_self=False, recursive=True)
               if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense))]
    return tf.add_n([tf.reduce_sum(tf.square(tf.cast(k, tf.float32))) for k in kernels])


@dataclass
class Training:
    model: DualNet
    optimizer: keras.optimizers.Optimizer
    step: Any  # the compiled training step


def build(hp: dict[str, Any], precision: Any) -> Training:
    """`precision` sets the Keras dtype policy before the layers exist and may wrap the optimizer."""
    model = DualNet(hp)
    optimizer = keras.optimizers.SGD(learning_rate=schedule(hp["lr_boundaries"], hp["lr_rates"]),
                                     momentum=hp["sgd_momentum"])
    optimizer = built(precision.wrap_optimizer(optimizer), model.trainable_variables)
    n, planes = hp["board_size"], 2 * hp["history"] + 1

    @tf.function(input_signature=[tf.TensorSpec((None, planes, n, n), tf.float32), tf.TensorSpec((None,), tf.int64),
                                  tf.TensorSpec((None,), tf.float32)])
    def step(features: tf.Tensor, moves: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits, value = model(features, training=True)
            policy_cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(moves, logits))
            value_cost = tf.reduce_mean(tf.square(value - values))
            loss = policy_cost + hp["value_cost_weight"] * value_cost + hp["l2_strength"] * l2_penalty(model)
        scaled_update(tape, loss, optimizer, model.trainable_variables)
        return loss

    return Training(model, optimizer, step)


def to_device(batch: Any, device: str) -> dict[str, tf.Tensor]:
    with tf.device(device):
        return {"features": tf.constant(batch.features), "moves": tf.constant(batch.moves, tf.int64),
                "values": tf.constant(batch.values)}


def forward(training: Training, inputs: dict[str, tf.Tensor]) -> dict[str, np.ndarray]:
    """The network alone in inference mode, run eagerly (no loss, no update): logits and values, as NumPy."""
    logits, values = training.model(inputs["features"], training=False)
    return {"logits": logits.numpy(), "values": values.numpy()}


def train_step(training: Training, inputs: dict[str, tf.Tensor], precision: Any) -> tf.Tensor:
    """One SGD step on policy cross-entropy + value MSE + L2; the math mode is set by the adapter."""
    return training.step(inputs["features"], inputs["moves"], inputs["values"])
