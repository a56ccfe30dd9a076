"""Deep Speech 2 on TensorFlow 2 / Keras 3: the network, its optimizer and one training step.

The same network as pytorch.py, from the same hyperparameters (workload.toml): two convolutions
with batch norm and clipped ReLU, bidirectional GRUs (directions concatenated), a ReLU layer,
CTC. Convolutions run channels-last (TensorFlow's CPU kernels need NHWC); the padding is explicit
and symmetric, as in the other frameworks, not Keras' "same". Nothing here times, logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from _shared.tf_amp import built, scaled_update


def _conv_out(length: Any, kernel: int, stride: int) -> Any:
    return (length + 2 * (kernel // 2) - kernel) // stride + 1


def _conv_block(c: int, kernel: list[int], stride: list[int], bn: bool, index: int) -> list[keras.layers.Layer]:
    layers: list[keras.layers.Layer] = [
        keras.layers.ZeroPadding2D(((kernel[0] // 2,) * 2, (kernel[1] // 2,) * 2)),
        keras.layers.Conv2D(c, tuple(kernel), tuple(stride), padding="valid", use_bias=not bn, name=f"conv{index}"),
    ]
    if bn:  # PyTorch's and MXNet's defaults: running averages with momentum 0.9 (0.1 in PyTorch's terms), eps 1e-5
        layers.append(keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=f"bn{index}"))
    layers.append(keras.layers.ReLU(max_value=20.0))  # hardtanh(0, 20) on a ReLU's domain
    return layers


class DeepSpeech2(keras.Model):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="deepspeech2")
        c, bn = hp["conv_channels"], bool(hp["conv_batchnorm"])
        self.k1, self.s1 = hp["conv1_kernel"], hp["conv1_stride"]
        self.k2, self.s2 = hp["conv2_kernel"], hp["conv2_stride"]
        self.conv = _conv_block(c, self.k1, self.s1, bn, 1) + _conv_block(c, self.k2, self.s2, bn, 2)
        self.rnn = [
            keras.layers.Bidirectional(
                keras.layers.GRU(hp["rnn_hidden"], return_sequences=True, reset_after=True), merge_mode="concat",
                name=f"bigru{i}")
            for i in range(hp["rnn_layers"])
        ]
        self.fc = keras.layers.Dense(hp["fc_hidden"], activation="relu", name="fc")
        self.out = keras.layers.Dense(len(hp["alphabet"]), name="out")
        freq = _conv_out(_conv_out(hp["frequency_bins"], self.k1[0], self.s1[0]), self.k2[0], self.s2[0])
        self.build((None, 1, hp["frequency_bins"], None))
        self.rnn_input = c * freq

    def build(self, input_shape: Any) -> None:
        shape = (None, input_shape[2], None, 1)
        for layer in self.conv:
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
        width = shape[1] * shape[3]
        for layer in self.rnn:
            layer.build((None, None, width))
            width = 2 * layer.forward_layer.units
        self.fc.build((None, None, width))
        self.out.build((None, None, self.fc.units))
        self.built = True

    def output_lengths(self, frames: tf.Tensor) -> tf.Tensor:
        return _conv_out(_conv_out(frames, self.k1[1], self.s1[1]), self.k2[1], self.s2[1])

    def call(self, features: tf.Tensor, frames: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        x = tf.transpose(features, (0, 2, 3, 1))            # (N, F, T, 1): channels last
        for layer in self.conv:
            x = layer(x, training=training)                 # (N, F', T', C)
        t = tf.shape(x)[2]
        x = tf.transpose(x, (0, 2, 3, 1))                   # (N, T', C, F'): features ordered c*F' + f
        x = tf.reshape(x, (tf.shape(x)[0], t, self.rnn_input))
        lengths = tf.minimum(self.output_lengths(frames), t)
        mask = tf.sequence_mask(lengths, t)
        for layer in self.rnn:
            x = layer(x, mask=mask, training=training)
        x = self.out(self.fc(x))
        return tf.nn.log_softmax(tf.cast(x, tf.float32), axis=-1), lengths


@dataclass
class Training:
    model: DeepSpeech2
    optimizer: keras.optimizers.Optimizer
    step: Any  # the compiled training step


def _ctc_mean(log_probs: tf.Tensor, lengths: tf.Tensor, labels: tf.Tensor, label_lengths: tf.Tensor) -> tf.Tensor:
    """PyTorch's CTCLoss 'mean': each utterance's loss divided by its target length, then the batch mean."""
    per_utt = tf.nn.ctc_loss(labels, log_probs, label_lengths, lengths, logits_time_major=False, blank_index=0)
    return tf.reduce_mean(per_utt / tf.cast(label_lengths, tf.float32))


def build(hp: dict[str, Any], precision: Any) -> Training:
    """`precision` sets the Keras dtype policy before the layers exist and may wrap the optimizer."""
    model = DeepSpeech2(hp)
    optimizer = keras.optimizers.SGD(learning_rate=hp["learning_rate"], momentum=hp["momentum"],
                                     weight_decay=hp["weight_decay"] or None, clipvalue=hp["clip_gradient_value"])
    optimizer = built(precision.wrap_optimizer(optimizer), model.trainable_variables)
    bins = hp["frequency_bins"]
    signature = [tf.TensorSpec((None, 1, bins, None), tf.float32), tf.TensorSpec((None,), tf.int32),
                 tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None,), tf.int32)]

    @tf.function(input_signature=signature)
    def step(features: tf.Tensor, frames: tf.Tensor, labels: tf.Tensor, label_lengths: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            log_probs, lengths = model(features, frames, training=True)
            loss = _ctc_mean(log_probs, lengths, labels, label_lengths)
        scaled_update(tape, loss, optimizer, model.trainable_variables)
        return loss

    return Training(model, optimizer, step)


def to_device(batch: Any, device: str) -> dict[str, tf.Tensor]:
    """The NumPy batch as tensors on `device`; the concatenated targets become a zero-padded matrix."""
    ends = np.cumsum(batch.label_lengths)
    padded = np.zeros((len(batch.label_lengths), int(batch.label_lengths.max())), dtype=np.int32)
    for i, (start, end) in enumerate(zip(ends - batch.label_lengths, ends)):
        padded[i, : end - start] = batch.labels[start:end]
    with tf.device(device):
        return {
            "features": tf.constant(batch.features),
            "frames": tf.constant(batch.feature_lengths, tf.int32),
            "labels": tf.constant(padded),
            "label_lengths": tf.constant(batch.label_lengths, tf.int32),
        }


def forward(training: Training, inputs: dict[str, tf.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """The network alone in inference mode, run eagerly (no loss, no update): log-probabilities
    (N, T', V) and output lengths (N,), as NumPy, to compare across frameworks."""
    log_probs, lengths = training.model(inputs["features"], inputs["frames"], training=False)
    return log_probs.numpy(), lengths.numpy()


def train_step(training: Training, inputs: dict[str, tf.Tensor], precision: Any) -> tf.Tensor:
    """One SGD step with gradient values clipped (Keras `clipvalue`); the math mode is set by the adapter."""
    return training.step(inputs["features"], inputs["frames"], inputs["labels"], inputs["label_lengths"])
