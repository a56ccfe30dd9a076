"""The training half the TensorFlow image classifiers share (ResNet-50, Inception-v3): PyTorch's
cross entropy with label smoothing, PyTorch's coupled weight decay, and the compiled step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from _shared.tf_amp import built, scaled_update


def cross_entropy(logits: tf.Tensor, labels: tf.Tensor, smoothing: float) -> tf.Tensor:
    """PyTorch's CrossEntropyLoss with label smoothing: (1 - e) NLL + e x the mean over classes of -log p."""
    log_p = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    nll = -tf.gather(log_p, labels, axis=1, batch_dims=1)
    return tf.reduce_mean((1.0 - smoothing) * nll - smoothing * tf.reduce_mean(log_p, axis=-1))


def l2_penalty(variables: list[tf.Variable], decay: float) -> tf.Tensor:
    """decay / 2 x the sum of squared weights: its gradient is PyTorch's and MXNet's coupled weight decay
    (grad + decay x weight), also under loss scaling; Keras' own weight_decay is decoupled."""
    return 0.5 * decay * tf.add_n([tf.reduce_sum(tf.square(tf.cast(v, tf.float32))) for v in variables])


@dataclass
class Training:
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    step: Any  # the compiled training step


def training(model: keras.Model, optimizer: keras.optimizers.Optimizer, hp: dict[str, Any],
             aux_weight: float = 0.0) -> Training:
    """The compiled step: cross entropy with hp's label smoothing (plus `aux_weight` x the auxiliary
    head's when the model returns (logits, aux_logits) in training), coupled weight decay, an update."""
    size, decay, smoothing = hp["image_size"], hp["weight_decay"], hp["label_smoothing"]
    optimizer = built(optimizer, model.trainable_variables)

    @tf.function(input_signature=[tf.TensorSpec((None, size, size, 3), tf.float32), tf.TensorSpec((None,), tf.int64)])
    def step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            out = model(images, training=True)
            if isinstance(out, (tuple, list)):
                loss = cross_entropy(out[0], labels, smoothing) + aux_weight * cross_entropy(out[1], labels, smoothing)
            else:
                loss = cross_entropy(out, labels, smoothing)
            regularized = loss + l2_penalty(model.trainable_variables, decay) if decay else loss
        scaled_update(tape, regularized, optimizer, model.trainable_variables)  # each replica's share of the mean
        return loss

    return Training(model, optimizer, step)


def to_device(batch: Any, device: str) -> dict[str, tf.Tensor]:
    """The NumPy batch (N, 3, S, S) as channels-last tensors on `device`."""
    with tf.device(device):
        return {"images": tf.constant(np.ascontiguousarray(batch.images.transpose(0, 2, 3, 1))),
                "labels": tf.constant(batch.labels)}


def forward(training: Training, inputs: dict[str, tf.Tensor]) -> np.ndarray:
    """The network alone in inference mode, run eagerly: logits (N, classes) as NumPy."""
    return training.model(inputs["images"], training=False).numpy()


def train_step(training: Training, inputs: dict[str, tf.Tensor], precision: Any) -> tf.Tensor:
    """One optimizer step; the math mode is set by the adapter."""
    return training.step(inputs["images"], inputs["labels"])
