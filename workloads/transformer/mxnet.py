"""Transformer base on MXNet 1.9 Gluon: the network, Adam with the inverse-square-root warm-up
schedule, and one training step with label-smoothed cross-entropy.

The same network as pytorch.py (torch.nn's TransformerEncoderLayer/TransformerDecoderLayer) written
out in hybridizable Gluon blocks, in the same order: post-norm layers ("LayerNorm(x + Sublayer(x))"),
attention as query/key/value/output dense layers (PyTorch packs the first three into one in_proj
matrix), ReLU feed-forward, LayerNorm epsilon 1e-5 as PyTorch's, one embedding table shared by
source, target and the pre-softmax projection (tied), sinusoidal positions kept as a constant.
Every size and rate comes from the hyperparameters handed in (workload.toml); nothing here times,
logs or profiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

LAYER_NORM_EPS = 1e-5  # torch.nn.Transformer*Layer's default layer_norm_eps
MASKED = -1e9           # added to the scores of keys that are padding or in the future: zero weight


def sinusoids(length: int, d_model: int) -> np.ndarray:
    """Sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    position = np.arange(length, dtype=np.float32)[:, None]
    rate = np.exp(np.arange(0, d_model, 2, dtype=np.float32) * (-math.log(10000.0) / d_model))
    pe = np.zeros((length, d_model), np.float32)
    pe[:, 0::2], pe[:, 1::2] = np.sin(position * rate), np.cos(position * rate)
    return pe


def _dense(units: int, in_units: int, prefix: str, weight_bound: float, bias_bound: float = 0.0,
           activation: str | None = None) -> gluon.nn.Dense:
    """A dense layer over the last axis, initialised uniformly as PyTorch does (see workload.toml)."""
    bias = mx.init.Uniform(bias_bound) if bias_bound else "zeros"
    return gluon.nn.Dense(units, activation=activation, flatten=False, in_units=in_units, prefix=prefix,
                          weight_initializer=mx.init.Uniform(weight_bound), bias_initializer=bias)


def _norm(d: int, prefix: str) -> gluon.nn.LayerNorm:
    return gluon.nn.LayerNorm(epsilon=LAYER_NORM_EPS, in_channels=d, prefix=prefix)


class Attention(gluon.HybridBlock):
    """Multi-head attention as torch.nn.MultiheadAttention computes it: softmax(q k^T / sqrt(d_head))
    over the keys that are neither padding nor (with `causal`) in the future, attention dropout,
    then the output projection."""

    def __init__(self, d_model: int, heads: int, dropout: float, causal: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.heads, self.head_size, self.causal = heads, d_model // heads, causal
        packed = math.sqrt(6.0 / (4 * d_model))  # Xavier-uniform over PyTorch's packed (3d, d) in_proj
        with self.name_scope():
            self.query, self.key, self.value = (_dense(d_model, d_model, f"{n}_", packed)
                                                for n in ("query", "key", "value"))
            self.out = _dense(d_model, d_model, "out_", 1.0 / math.sqrt(d_model))
            self.dropout = gluon.nn.Dropout(dropout)

    def _split(self, F: Any, x: Any) -> Any:  # (B, S, d) -> (B * heads, S, d_head)
        return F.reshape(F.transpose(F.reshape(x, (0, 0, self.heads, -1)), (0, 2, 1, 3)), (-3, 0, 0))

    def hybrid_forward(self, F: Any, x: Any, memory: Any, key_pad: Any) -> Any:
        q, k, v = self._split(F, self.query(x)), self._split(F, self.key(memory)), self._split(F, self.value(memory))
        scores = F.batch_dot(q, k, transpose_b=True) / math.sqrt(self.head_size)     # (B*h, Tq, Tk)
        scores = F.reshape(scores, (-4, -1, self.heads, 0, 0))                        # (B, h, Tq, Tk)
        scores = F.broadcast_add(scores, F.reshape(key_pad, (0, 1, 1, -1)) * MASKED)  # padding keys
        if self.causal:
            steps = F.contrib.arange_like(x, axis=1)
            future = F.broadcast_greater(F.reshape(steps, (1, -1)), F.reshape(steps, (-1, 1)))  # key after query
            scores = F.broadcast_add(scores, F.expand_dims(F.expand_dims(future, 0), 0) * MASKED)
        probs = self.dropout(F.softmax(scores, axis=-1))
        context = F.batch_dot(F.reshape(probs, (-3, 0, 0)), v)                       # (B*h, Tq, d_head)
        context = F.reshape(F.transpose(F.reshape(context, (-4, -1, self.heads, 0, 0)), (0, 2, 1, 3)), (0, 0, -3))
        return self.out(context)


class FeedForward(gluon.HybridBlock):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        d, ffn = hp["d_model"], hp["ffn_hidden"]
        with self.name_scope():
            self.linear1 = _dense(ffn, d, "linear1_", 1 / math.sqrt(d), 1 / math.sqrt(d), activation=hp["activation"])
            self.linear2 = _dense(d, ffn, "linear2_", 1 / math.sqrt(ffn), 1 / math.sqrt(ffn))
            self.dropout = gluon.nn.Dropout(hp["dropout"])

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.linear2(self.dropout(self.linear1(x)))


class EncoderLayer(gluon.HybridBlock):
    """torch.nn.TransformerEncoderLayer, post-norm: self-attention, norm1, feed-forward, norm2."""

    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        d = hp["d_model"]
        with self.name_scope():
            self.attention = Attention(d, hp["heads"], hp["dropout"], prefix="self_attn_")
            self.norm1, self.norm2 = _norm(d, "norm1_"), _norm(d, "norm2_")
            self.ff = FeedForward(hp, prefix="ff_")
            self.dropout = gluon.nn.Dropout(hp["dropout"])

    def hybrid_forward(self, F: Any, x: Any, pad: Any) -> Any:
        x = self.norm1(x + self.dropout(self.attention(x, x, pad)))
        return self.norm2(x + self.dropout(self.ff(x)))


class DecoderLayer(gluon.HybridBlock):
    """torch.nn.TransformerDecoderLayer, post-norm: causal self-attention, norm1, attention over the
    encoder's output, norm2, feed-forward, norm3."""

    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        d = hp["d_model"]
        with self.name_scope():
            self.self_attention = Attention(d, hp["heads"], hp["dropout"], causal=True, prefix="self_attn_")
            self.cross_attention = Attention(d, hp["heads"], hp["dropout"], prefix="multihead_attn_")
            self.norm1, self.norm2, self.norm3 = _norm(d, "norm1_"), _norm(d, "norm2_"), _norm(d, "norm3_")
            self.ff = FeedForward(hp, prefix="ff_")
            self.dropout = gluon.nn.Dropout(hp["dropout"])

    def hybrid_forward(self, F: Any, x: Any, memory: Any, target_pad: Any, source_pad: Any) -> Any:
        x = self.norm1(x + self.dropout(self.self_attention(x, x, target_pad)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, memory, source_pad)))
        return self.norm3(x + self.dropout(self.ff(x)))


class TiedProjection(gluon.HybridBlock):
    """The pre-softmax projection whose weight is the embedding table (Sec. 3.4), with no bias."""

    def __init__(self, embedding: gluon.nn.Embedding, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._tied = (embedding,)  # in a tuple: an attribute that is a Block would become a child
        self.vocab = embedding.weight.shape[0]
        self.bias = None
        with self.name_scope():
            self.weight = embedding.weight  # the same Parameter: one table, three uses

    @property
    def tied_to(self) -> gluon.nn.Embedding:
        return self._tied[0]

    def hybrid_forward(self, F: Any, x: Any, weight: Any) -> Any:
        return F.FullyConnected(x, weight, num_hidden=self.vocab, no_bias=True, flatten=False)


class Transformer(gluon.HybridBlock):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        d = hp["d_model"]
        if not hp["shared_embeddings"]:
            raise ValueError("this MXNet Transformer is written for shared_embeddings = true (workload.toml)")
        if hp["source_vocab_size"] != hp["target_vocab_size"]:
            raise ValueError("shared_embeddings needs source_vocab_size == target_vocab_size")
        self.d_model = d
        with self.name_scope():
            self.embed = gluon.nn.Embedding(hp["source_vocab_size"], d, prefix="embed_",
                                            weight_initializer=mx.init.Normal(d ** -0.5))
            self.pe = self.params.get_constant("pe", sinusoids(hp["max_length"] + 1, d))
            self.dropout = gluon.nn.Dropout(hp["dropout"])
            self.encoder = gluon.nn.HybridSequential(prefix="encoder_")
            with self.encoder.name_scope():
                for i in range(hp["encoder_layers"]):
                    self.encoder.add(EncoderLayer(hp, prefix=f"layer{i}_"))
            self.decoder = gluon.nn.HybridSequential(prefix="decoder_")
            with self.decoder.name_scope():
                for i in range(hp["decoder_layers"]):
                    self.decoder.add(DecoderLayer(hp, prefix=f"layer{i}_"))
            self.project = TiedProjection(self.embed, prefix="project_")

    def _embed(self, F: Any, ids: Any, pe: Any) -> Any:
        x = self.embed(ids) * math.sqrt(self.d_model)                      # (B, T, d)
        first = F.reshape(F.slice_axis(x, axis=0, begin=0, end=1), (-3, 0))  # (T, d): T rows of pe
        return self.dropout(F.broadcast_add(x, F.expand_dims(F.slice_like(pe, first, axes=(0,)), 0)))

    def hybrid_forward(self, F: Any, source: Any, source_pad: Any, target_in: Any, target_pad: Any,
                       pe: Any) -> Any:
        memory = self._embed(F, source, pe)
        for layer in self.encoder:
            memory = layer(memory, source_pad)
        h = self._embed(F, target_in, pe)
        for layer in self.decoder:
            h = layer(h, memory, target_pad, source_pad)
        return self.project(h)


def learning_rate(hp: dict[str, Any], step: int) -> float:
    """Sec. 5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), step from 1."""
    s = step + 1
    return hp["d_model"] ** -0.5 * min(s ** -0.5, s * hp["warmup_steps"] ** -1.5)


@dataclass
class Training:
    model: Transformer
    trainer: gluon.Trainer
    ctx: mx.Context
    hp: dict[str, Any]
    steps: int = 0


def build(hp: dict[str, Any], ctx: mx.Context) -> Training:
    if hp["optimizer"] != "adam":
        raise ValueError(f"optimizer {hp['optimizer']!r} is not implemented; use 'adam'")
    model = Transformer(hp, prefix="transformer_")
    model.initialize(ctx=ctx)  # every block names its own initializers (LayerNorm: 1 and 0)
    model.hybridize(static_alloc=True)
    trainer = gluon.Trainer(model.collect_params(), "adam", {
        "learning_rate": learning_rate(hp, 0), "beta1": hp["adam_beta1"], "beta2": hp["adam_beta2"],
        "epsilon": hp["adam_epsilon"]})
    return Training(model, trainer, ctx, hp)


def to_device(batch: Any, ctx: mx.Context) -> dict[str, Any]:
    """Ids as float32 (MXNet's operators take indices so; exact below 2^24) and padding masks (1 = pad)."""
    def padding(lengths: np.ndarray, width: int) -> mx.nd.NDArray:
        return mx.nd.array(np.arange(width)[None, :] >= lengths[:, None], ctx=ctx)

    return {
        "source": mx.nd.array(batch.source, ctx=ctx),
        "source_pad": padding(batch.source_lengths, batch.source.shape[1]),
        "target_in": mx.nd.array(batch.target_in, ctx=ctx),
        "target_pad": padding(batch.target_lengths, batch.target_in.shape[1]),
        "target_out": mx.nd.array(batch.target_out, ctx=ctx),
    }


def smoothed_cross_entropy(logits: Any, target_out: Any, smoothing: float) -> Any:
    """PyTorch's CrossEntropyLoss(label_smoothing=e, ignore_index=-100): per token (1 - e) x NLL + e x
    the mean over the vocabulary of -log p, averaged over the target tokens that are not padding."""
    valid = target_out >= 0
    logp = mx.nd.log_softmax(logits, axis=-1)
    nll = -mx.nd.pick(logp, target_out * valid, axis=-1)
    per_token = (1.0 - smoothing) * nll - smoothing * logp.mean(axis=-1)
    return (per_token * valid).sum() / valid.sum()


def forward(training: Training, inputs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The network alone in inference mode (no loss, no update, dropout off): log-probabilities
    (N, T, V) and target lengths (N,), as NumPy, to compare across frameworks."""
    logits = training.model(inputs["source"], inputs["source_pad"], inputs["target_in"], inputs["target_pad"])
    lengths = (inputs["target_out"] >= 0).sum(axis=1).asnumpy().astype(np.int64)
    return mx.nd.log_softmax(logits.astype("float32"), axis=-1).asnumpy(), lengths


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> Any:
    """One Adam step on the mean label-smoothed cross-entropy per target token, the learning rate on
    the paper's schedule; `precision` may scale the loss (AMP on a GPU)."""
    hp, trainer = training.hp, training.trainer
    with autograd.record():
        logits = training.model(inputs["source"], inputs["source_pad"], inputs["target_in"], inputs["target_pad"])
        loss = smoothed_cross_entropy(logits.astype("float32"), inputs["target_out"], float(hp["label_smoothing"]))
        with precision.scale_loss(loss, trainer) as scaled:
            autograd.backward(scaled)
    trainer.set_learning_rate(learning_rate(hp, training.steps))
    trainer.step(1)  # the loss is already a mean
    training.steps += 1
    return loss
