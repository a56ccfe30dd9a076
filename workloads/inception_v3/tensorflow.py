"""Inception-v3 on TensorFlow 2 / Keras 3: the network with its auxiliary classifier, RMSProp and
one training step.

The same network as pytorch.py (torchvision's inception_v3, written out in Keras layers: every
convolution with its batch norm, each Inception module's branches in torchvision's order, the
auxiliary head after Mixed_6e while training). Images run channels-last (TensorFlow's CPU kernels
need NHWC). The 3x3 average pools inside the modules count their zero padding, as PyTorch's do
(Keras' "same" pooling would not). Every size and rate comes from the hyperparameters handed in
(workload.toml); nothing here times, logs or profiles.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from _shared import keras_classifier as classifier

# the loss, the step and the batch layout are the shared classifier's (workloads/_shared)
to_device, forward, train_step = classifier.to_device, classifier.forward, classifier.train_step


class BasicConv(keras.layers.Layer):
    """torchvision's BasicConv2d: a bias-free convolution (truncated-normal weights, std 0.1 unless
    given), batch norm (eps 0.001), ReLU. PyTorch pads none or half the kernel, always at stride 1:
    "valid" or "same" here."""

    def __init__(self, filters: int, kernel: int | tuple[int, int], stride: int = 1, same: bool = False,
                 std: float = 0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conv = keras.layers.Conv2D(filters, kernel, stride, padding="same" if same else "valid", use_bias=False,
                                        kernel_initializer=keras.initializers.TruncatedNormal(stddev=std))
        self.bn = keras.layers.BatchNormalization(momentum=0.9, epsilon=0.001)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        return tf.nn.relu(self.bn(self.conv(x), training=training))


def chain(layers: list[Any], x: tf.Tensor, training: bool) -> tf.Tensor:
    for layer in layers:
        x = layer(x, training=training)
    return x


def avg_pool() -> list[keras.layers.Layer]:
    """PyTorch's avg_pool2d(3, stride 1, padding 1): the zero padding counts in every average."""
    return [keras.layers.ZeroPadding2D(1), keras.layers.AveragePooling2D(3, 1)]


def max_pool() -> keras.layers.Layer:
    return keras.layers.MaxPooling2D(3, 2)


class Branches(keras.layers.Layer):
    """An Inception module: branches of layers run in order, concatenated on channels."""

    def __init__(self, branches: list[list[keras.layers.Layer]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.branches = branches

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        return tf.concat([chain(branch, x, training) for branch in self.branches], axis=-1)


class Split(keras.layers.Layer):
    """InceptionE's fork: one input through a 1x3 and a 3x1 convolution, concatenated."""

    def __init__(self, filters: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.a, self.b = BasicConv(filters, (1, 3), same=True), BasicConv(filters, (3, 1), same=True)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        return tf.concat([self.a(x, training=training), self.b(x, training=training)], axis=-1)


def inception_a(pool_features: int) -> Branches:
    return Branches([[BasicConv(64, 1)],
                     [BasicConv(48, 1), BasicConv(64, 5, same=True)],
                     [BasicConv(64, 1), BasicConv(96, 3, same=True), BasicConv(96, 3, same=True)],
                     [*avg_pool(), BasicConv(pool_features, 1)]])


def inception_b() -> Branches:
    return Branches([[BasicConv(384, 3, 2)],
                     [BasicConv(64, 1), BasicConv(96, 3, same=True), BasicConv(96, 3, 2)],
                     [max_pool()]])


def inception_c(c7: int) -> Branches:
    return Branches([[BasicConv(192, 1)],
                     [BasicConv(c7, 1), BasicConv(c7, (1, 7), same=True), BasicConv(192, (7, 1), same=True)],
                     [BasicConv(c7, 1), BasicConv(c7, (7, 1), same=True), BasicConv(c7, (1, 7), same=True),
                      BasicConv(c7, (7, 1), same=True), BasicConv(192, (1, 7), same=True)],
                     [*avg_pool(), BasicConv(192, 1)]])


def inception_d() -> Branches:
    return Branches([[BasicConv(192, 1), BasicConv(320, 3, 2)],
                     [BasicConv(192, 1), BasicConv(192, (1, 7), same=True), BasicConv(192, (7, 1), same=True),
                      BasicConv(192, 3, 2)],
                     [max_pool()]])


def inception_e() -> Branches:
    return Branches([[BasicConv(320, 1)],
                     [BasicConv(384, 1), Split(384)],
                     [BasicConv(448, 1), BasicConv(384, 3, same=True), Split(384)],
                     [*avg_pool(), BasicConv(192, 1)]])


class InceptionV3(keras.Model):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="inception_v3")
        classes = hp["num_classes"]
        self.stem = [BasicConv(32, 3, 2), BasicConv(32, 3), BasicConv(64, 3, same=True), max_pool(),
                     BasicConv(80, 1), BasicConv(192, 3), max_pool()]
        self.mixed_5_6 = [inception_a(32), inception_a(64), inception_a(64), inception_b(),
                          inception_c(128), inception_c(160), inception_c(160), inception_c(192)]
        self.aux = None
        if hp["aux_logits"]:  # torchvision's InceptionAux: 5x5/3 average pool, 1x1, 5x5, pool, dense
            self.aux = [BasicConv(128, 1), BasicConv(768, 5, std=0.01)]
            self.aux_fc = keras.layers.Dense(classes, kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=0.001), name="aux_fc")
        self.mixed_7 = [inception_d(), inception_e(), inception_e()]
        self.dropout = keras.layers.Dropout(hp["dropout"])
        self.fc = keras.layers.Dense(classes, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.1),
                                     name="fc")
        # creates every weight, the auxiliary head's too, without touching the batch-norm statistics
        self(tf.zeros((1, hp["image_size"], hp["image_size"], 3)), training=False, with_aux=True)

    def call(self, images: tf.Tensor, training: bool = False, with_aux: bool | None = None) -> Any:
        """Logits; (logits, aux_logits) while training a network with the auxiliary head, as torchvision."""
        x = chain(self.mixed_5_6, chain(self.stem, images, training), training)
        aux = None
        if self.aux is not None and (training if with_aux is None else with_aux):
            a = chain(self.aux, tf.nn.avg_pool2d(x, 5, 3, "VALID"), training)
            aux = self.aux_fc(tf.reduce_mean(a, axis=(1, 2)))
        x = chain(self.mixed_7, x, training)
        logits = self.fc(self.dropout(tf.reduce_mean(x, axis=(1, 2)), training=training))
        return (logits, aux) if aux is not None else logits


def build(hp: dict[str, Any], precision: Any) -> classifier.Training:
    """`precision` sets the Keras dtype policy before the layers exist and may wrap the optimizer.
    Keras' RMSprop divides by sqrt(mean square + epsilon), PyTorch's by sqrt(mean square) + epsilon
    (workload.toml lists it)."""
    optimizer = precision.wrap_optimizer(keras.optimizers.RMSprop(
        learning_rate=hp["learning_rate"], rho=hp["rmsprop_decay"], epsilon=hp["rmsprop_epsilon"]))
    return classifier.training(InceptionV3(hp), optimizer, hp, hp["aux_loss_weight"] if hp["aux_logits"] else 0.0)
