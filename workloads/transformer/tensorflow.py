"""Transformer base on TensorFlow 2 / Keras 3: the network, Adam with the inverse-square-root warm-up
schedule, and one training step with label-smoothed cross-entropy.

The same network as pytorch.py (torch.nn's TransformerEncoderLayer/TransformerDecoderLayer) written
out in Keras layers, in the same order: post-norm layers ("LayerNorm(x + Sublayer(x))"), attention
as query/key/value/output dense layers (PyTorch packs the first three into one in_proj matrix),
ReLU feed-forward, LayerNorm epsilon 1e-5 as PyTorch's, one embedding table shared by source,
target and the pre-softmax projection (tied), sinusoidal positions. Every size and rate comes from
the hyperparameters handed in (workload.toml); nothing here times, logs or profiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from _shared.tf_amp import built, scaled_update

LAYER_NORM_EPS = 1e-5  # torch.nn.Transformer*Layer's default layer_norm_eps


def sinusoids(length: int, d_model: int) -> np.ndarray:
    """Sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    position = np.arange(length, dtype=np.float32)[:, None]
    rate = np.exp(np.arange(0, d_model, 2, dtype=np.float32) * (-math.log(10000.0) / d_model))
    pe = np.zeros((length, d_model), np.float32)
    pe[:, 0::2], pe[:, 1::2] = np.sin(position * rate), np.cos(position * rate)
    return pe


def _torch_linear(fan_in: int, bias: bool = True) -> dict[str, Any]:
    """PyTorch's nn.Linear initialisation: weight and bias uniform in +-1/sqrt(fan_in)."""
    bound = 1.0 / math.sqrt(fan_in)  # an initializer per weight: one instance repeats its draw
    return {"kernel_initializer": keras.initializers.RandomUniform(-bound, bound),
            "bias_initializer": keras.initializers.RandomUniform(-bound, bound) if bias else "zeros"}


class Attention(keras.layers.Layer):
    """Multi-head attention as torch.nn.MultiheadAttention computes it: softmax(q k^T / sqrt(d_head))
    over the keys that are neither padding nor (with `causal`) in the future, attention dropout,
    then the output projection."""

    def __init__(self, d_model: int, heads: int, dropout: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.heads, self.head_size = heads, d_model // heads
        # MultiheadAttention: Xavier-uniform over the packed (3d, d) in_proj, zero biases; its output
        # projection keeps nn.Linear's weight initialisation with a zero bias.
        # (a Keras 3 initializer repeats its draw for every weight it initialises: one per projection)
        bound = math.sqrt(6.0 / (4 * d_model))
        self.query, self.key, self.value = (
            keras.layers.Dense(d_model, kernel_initializer=keras.initializers.RandomUniform(-bound, bound), name=n)
            for n in ("query", "key", "value"))
        self.out = keras.layers.Dense(d_model, kernel_initializer=_torch_linear(d_model)["kernel_initializer"],
                                      name="out")
        self.dropout = keras.layers.Dropout(dropout)

    def build(self, input_shape: Any) -> None:
        for layer in (self.query, self.key, self.value, self.out):
            layer.build((None, None, self.heads * self.head_size))
        self.built = True

    def _split(self, x: tf.Tensor) -> tf.Tensor:
        b, s = tf.shape(x)[0], tf.shape(x)[1]
        return tf.transpose(tf.reshape(x, (b, s, self.heads, self.head_size)), (0, 2, 1, 3))  # (B, h, S, d)

    def call(self, x: tf.Tensor, memory: tf.Tensor, key_pad: tf.Tensor, causal: bool = False,
             training: bool = False) -> tf.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(memory)), self._split(self.value(memory))
        scores = tf.cast(tf.matmul(q, k, transpose_b=True), tf.float32) / math.sqrt(self.head_size)
        masked = key_pad[:, None, None, :]                                   # (B, 1, 1, S): padding keys
        if causal:
            t = tf.shape(x)[1]
            future = tf.linalg.band_part(tf.ones((t, t), tf.bool), 0, -1) & ~tf.eye(t, dtype=tf.bool)
            masked = masked | future[None, None]
        probs = tf.nn.softmax(tf.where(masked, -np.inf, scores), axis=-1)
        probs = self.dropout(tf.cast(probs, v.dtype), training=training)
        context = tf.transpose(tf.matmul(probs, v), (0, 2, 1, 3))
        return self.out(tf.reshape(context, (tf.shape(x)[0], tf.shape(x)[1], self.heads * self.head_size)))


def _norm(name: str) -> keras.layers.LayerNormalization:
    return keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPS, name=name)


class FeedForward(keras.layers.Layer):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        d, ffn = hp["d_model"], hp["ffn_hidden"]
        self.linear1 = keras.layers.Dense(ffn, activation=hp["activation"], name="linear1", **_torch_linear(d))
        self.linear2 = keras.layers.Dense(d, name="linear2", **_torch_linear(ffn))
        self.dropout = keras.layers.Dropout(hp["dropout"])

    def build(self, input_shape: Any) -> None:
        self.linear1.build((None, None, self.linear2.units))
        self.linear2.build((None, None, self.linear1.units))
        self.built = True

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        return self.linear2(self.dropout(self.linear1(x), training=training))


class EncoderLayer(keras.layers.Layer):
    """torch.nn.TransformerEncoderLayer, post-norm: self-attention, norm1, feed-forward, norm2."""

    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.attention = Attention(hp["d_model"], hp["heads"], hp["dropout"], name="self_attn")
        self.norm1, self.norm2 = _norm("norm1"), _norm("norm2")
        self.ff = FeedForward(hp, name="ff")
        self.dropout = keras.layers.Dropout(hp["dropout"])

    def build(self, input_shape: Any) -> None:
        for layer in (self.attention, self.norm1, self.ff, self.norm2):
            layer.build(input_shape)
        self.built = True

    def call(self, x: tf.Tensor, pad: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, x, pad, training=training), training=training))
        return self.norm2(x + self.dropout(self.ff(x, training=training), training=training))


class DecoderLayer(keras.layers.Layer):
    """torch.nn.TransformerDecoderLayer, post-norm: causal self-attention, norm1, attention over the
    encoder's output, norm2, feed-forward, norm3."""

    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.self_attention = Attention(hp["d_model"], hp["heads"], hp["dropout"], name="self_attn")
        self.cross_attention = Attention(hp["d_model"], hp["heads"], hp["dropout"], name="multihead_attn")
        self.norm1, self.norm2, self.norm3 = _norm("norm1"), _norm("norm2"), _norm("norm3")
        self.ff = FeedForward(hp, name="ff")
        self.dropout = keras.layers.Dropout(hp["dropout"])

    def build(self, input_shape: Any) -> None:
        for layer in (self.self_attention, self.norm1, self.cross_attention, self.norm2, self.ff, self.norm3):
            layer.build(input_shape)
        self.built = True

    def call(self, x: tf.Tensor, memory: tf.Tensor, target_pad: tf.Tensor, source_pad: tf.Tensor,
             training: bool = False) -> tf.Tensor:
        drop = lambda y: self.dropout(y, training=training)  # noqa: E731
        x = self.norm1(x + drop(self.self_attention(x, x, target_pad, causal=True, training=training)))
        x = self.norm2(x + drop(self.cross_attention(x, memory, source_pad, training=training)))
        return self.norm3(x + drop(self.ff(x, training=training)))


class TiedProjection(keras.layers.Layer):
    """The pre-softmax projection whose weight is the embedding table (Sec. 3.4), with no bias."""

    def __init__(self, embedding: keras.layers.Embedding, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tied_to = embedding
        self.bias = None

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return tf.matmul(x, tf.cast(self.tied_to.embeddings, x.dtype), transpose_b=True)


class Transformer(keras.Model):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="transformer")
        d = hp["d_model"]
        if not hp["shared_embeddings"]:
            raise ValueError("this TensorFlow Transformer is written for shared_embeddings = true (workload.toml)")
        if hp["source_vocab_size"] != hp["target_vocab_size"]:
            raise ValueError("shared_embeddings needs source_vocab_size == target_vocab_size")
        self.d_model = d
        self.embed = keras.layers.Embedding(hp["source_vocab_size"], d, name="embed",
                                            embeddings_initializer=keras.initializers.RandomNormal(0.0, d ** -0.5))
        self.pe = tf.constant(sinusoids(hp["max_length"] + 1, d))
        self.dropout = keras.layers.Dropout(hp["dropout"])
        self.encoder = [EncoderLayer(hp, name=f"encoder{i}") for i in range(hp["encoder_layers"])]
        self.decoder = [DecoderLayer(hp, name=f"decoder{i}") for i in range(hp["decoder_layers"])]
        self.project = TiedProjection(self.embed, name="project")
        self.embed.build((None, None))
        for layer in self.encoder + self.decoder:
            layer.build((None, None, d))
        self.built = True

    def _embed(self, ids: tf.Tensor, training: bool) -> tf.Tensor:
        x = self.embed(ids)
        x = x * tf.cast(math.sqrt(self.d_model), x.dtype) + tf.cast(self.pe[: tf.shape(ids)[1]], x.dtype)
        return self.dropout(x, training=training)

    def call(self, source: tf.Tensor, source_pad: tf.Tensor, target_in: tf.Tensor, target_pad: tf.Tensor,
             training: bool = False) -> tf.Tensor:
        memory = self._embed(source, training)
        for layer in self.encoder:
            memory = layer(memory, source_pad, training=training)
        h = self._embed(target_in, training)
        for layer in self.decoder:
            h = layer(h, memory, target_pad, source_pad, training=training)
        return self.project(h)


class InverseSqrt(keras.optimizers.schedules.LearningRateSchedule):
    """Sec. 5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), step from 1."""

    def __init__(self, d_model: int, warmup_steps: int) -> None:
        self.d_model, self.warmup_steps = d_model, warmup_steps

    def __call__(self, step: Any) -> tf.Tensor:
        s = tf.cast(step, tf.float32) + 1.0
        return self.d_model ** -0.5 * tf.minimum(s ** -0.5, s * self.warmup_steps ** -1.5)


@dataclass
class Training:
    model: Transformer
    optimizer: keras.optimizers.Optimizer
    step: Any  # the compiled training step


def smoothed_cross_entropy(logits: tf.Tensor, target_out: tf.Tensor, smoothing: float) -> tf.Tensor:
    """PyTorch's CrossEntropyLoss(label_smoothing=e, ignore_index=-100): per token (1 - e) x NLL + e x
    the mean over the vocabulary of -log p, averaged over the target tokens that are not padding."""
    valid = target_out >= 0
    logp = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    nll = -tf.gather(logp, tf.where(valid, target_out, 0), batch_dims=2)
    per_token = (1.0 - smoothing) * nll - smoothing * tf.reduce_mean(logp, axis=-1)
    return tf.reduce_sum(tf.where(valid, per_token, 0.0)) / tf.reduce_sum(tf.cast(valid, tf.float32))


def build(hp: dict[str, Any], precision: Any) -> Training:
    """`precision` sets the Keras dtype policy before the layers exist and may wrap the optimizer."""
    if hp["optimizer"] != "adam":
        raise ValueError(f"optimizer {hp['optimizer']!r} is not implemented; use 'adam'")
    model = Transformer(hp)
    optimizer = keras.optimizers.Adam(learning_rate=InverseSqrt(hp["d_model"], hp["warmup_steps"]),
                                      beta_1=hp["adam_beta1"], beta_2=hp["adam_beta2"], epsilon=hp["adam_epsilon"])
    optimizer = built(precision.wrap_optimizer(optimizer), model.trainable_variables)
    ids, pad = tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, None), tf.bool)
    smoothing = float(hp["label_smoothing"])

    @tf.function(input_signature=[ids, pad, ids, pad, ids])
    def step(source: tf.Tensor, source_pad: tf.Tensor, target_in: tf.Tensor, target_pad: tf.Tensor,
             target_out: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(source, source_pad, target_in, target_pad, training=True)
            loss = smoothed_cross_entropy(logits, target_out, smoothing)
        scaled_update(tape, loss, optimizer, model.trainable_variables)
        return loss

    return Training(model, optimizer, step)


def _padding(lengths: np.ndarray, width: int) -> np.ndarray:
    """True where a position is padding."""
    return np.arange(width)[None, :] >= lengths[:, None]


def to_device(batch: Any, device: str) -> dict[str, tf.Tensor]:
    with tf.device(device):
        return {
            "source": tf.constant(batch.source, tf.int32),
            "source_pad": tf.constant(_padding(batch.source_lengths, batch.source.shape[1])),
            "target_in": tf.constant(batch.target_in, tf.int32),
            "target_pad": tf.constant(_padding(batch.target_lengths, batch.target_in.shape[1])),
            "target_out": tf.constant(batch.target_out, tf.int32),
        }


def forward(training: Training, inputs: dict[str, tf.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """The network alone in inference mode, run eagerly (no loss, no update, dropout off):
    log-probabilities (N, T, V) and target lengths (N,), as NumPy, to compare across frameworks."""
    logits = training.model(inputs["source"], inputs["source_pad"], inputs["target_in"], inputs["target_pad"],
                            training=False)
    lengths = np.sum(inputs["target_out"].numpy() >= 0, axis=1)
    return tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1).numpy(), lengths


def train_step(training: Training, inputs: dict[str, tf.Tensor], precision: Any) -> tf.Tensor:
    """One Adam step on the mean label-smoothed cross-entropy per target token."""
    return training.step(inputs["source"], inputs["source_pad"], inputs["target_in"], inputs["target_pad"],
                         inputs["target_out"])
