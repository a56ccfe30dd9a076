"""Seq2Seq on MXNet 1.9 Gluon, as the TBD paper ran it on MXNet (Sockeye's RNN model: a
bidirectional LSTM encoder, an LSTM decoder with attention and input feeding): the network, its
optimizer and one training step.

The same network as pytorch.py, from the same hyperparameters (workload.toml). Gluon's LSTM cells
carry PyTorch's parameters (gates i, f, c, o; input and hidden biases). The encoder's directions
are LSTM cells unrolled with each sentence's length (`valid_length`): MXNet's fused LSTM ignores
`sequence_length` on the CPU, so its final states and backward outputs would read the padding.
The model is a Block whose loops run in Python (the decoder's length changes with every batch);
its cells, embeddings and dense layers are hybridized.
Nothing here times, logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon


def _check(hp: dict[str, Any]) -> None:
    wanted = {"encoder_type": "bi", "encoder_layers": 2, "decoder_layers": 2, "unit_type": "lstm",
              "attention": "scaled_luong", "output_attention": True, "residual": False}
    wrong = {k: hp[k] for k, v in wanted.items() if hp[k] != v}
    if wrong:
        raise ValueError(f"this implementation builds the tutorial's IWSLT15 architecture {wanted}; got {wrong}")


class Seq2Seq(gluon.Block):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check(hp)
        u = self.units = hp["num_units"]
        uniform = mx.init.Uniform(hp["init_weight"])  # Gluon's cells would start their biases at zero

        def cell(input_size: int, prefix: str) -> gluon.rnn.LSTMCell:
            return gluon.rnn.LSTMCell(u, input_size=input_size, prefix=prefix, i2h_bias_initializer=uniform,
                                      h2h_bias_initializer=uniform)

        with self.name_scope():
            self.source_embed = gluon.nn.Embedding(hp["source_vocab_size"], u, prefix="source_embed_")
            self.target_embed = gluon.nn.Embedding(hp["target_vocab_size"], u, prefix="target_embed_")
            self.dropout = gluon.nn.Dropout(hp["dropout"])
            self.encoder_fwd = cell(u, "encoder_fwd_")
            self.encoder_bwd = cell(u, "encoder_bwd_")
            self.memory_layer = gluon.nn.Dense(u, use_bias=False, flatten=False, in_units=2 * u, prefix="memory_")
            self.scale = self.params.get("scale", shape=(1,), init=mx.init.One())  # g of "scaled_luong" (MXNet 1 has no 0-d arrays)
            self.cell1 = cell(2 * u, "decoder1_")  # input feeding: [y; attention]
            self.cell2 = cell(u, "decoder2_")
            self.attention_layer = gluon.nn.Dense(u, use_bias=False, flatten=False, in_units=3 * u,
                                                  prefix="attention_")
            self.project = gluon.nn.Dense(hp["target_vocab_size"], use_bias=False, flatten=False, in_units=u,
                                          prefix="project_")
        self.encoder_fwd.direction, self.encoder_bwd.direction = "forward", "backward"

    def encode(self, source: Any, lengths: Any) -> tuple[Any, list[list[Any]]]:
        x = self.dropout(self.source_embed(source)).swapaxes(0, 1)         # (S, N, u): SequenceReverse's layout
        steps = source.shape[1]
        reverse = lambda y: mx.nd.SequenceReverse(y, sequence_length=lengths, use_sequence_length=True)  # noqa: E731
        fwd, state_f = self.encoder_fwd.unroll(steps, x, layout="TNC", merge_outputs=True, valid_length=lengths)
        bwd, state_b = self.encoder_bwd.unroll(steps, reverse(x), layout="TNC", merge_outputs=True,
                                               valid_length=lengths)
        memory = mx.nd.concat(fwd, reverse(bwd), dim=2).swapaxes(0, 1)      # (N, S, 2u), padding reads as zeros
        return memory, [state_f, state_b]                                   # forward -> layer 1, backward -> 2

    def forward(self, source: Any, source_lengths: Any, target_in: Any) -> Any:
        memory, states = self.encode(source, source_lengths)
        keys = self.memory_layer(memory)                                    # (N, S, u)
        steps = mx.nd.arange(source.shape[1], ctx=source.context).reshape((1, -1))
        pad = mx.nd.broadcast_greater_equal(steps, source_lengths.reshape((-1, 1)))
        embedded = self.target_embed(target_in)                             # (N, T, u)
        attention = mx.nd.zeros((embedded.shape[0], self.units), ctx=embedded.context, dtype=embedded.dtype)
        scale = self.scale.data(embedded.context)
        outputs = []
        for t in range(embedded.shape[1]):
            x = mx.nd.concat(embedded[:, t], attention, dim=1)
            for i, cell in enumerate((self.cell1, self.cell2)):
                x, states[i] = cell(self.dropout(x), states[i])
            scores = mx.nd.broadcast_mul(scale, mx.nd.batch_dot(keys, x.expand_dims(2)).squeeze(axis=2))
            weights = mx.nd.softmax(mx.nd.where(pad, mx.nd.full(scores.shape, -np.inf, ctx=scores.context), scores))
            context = mx.nd.batch_dot(weights.expand_dims(1), memory).squeeze(axis=1)
            attention = self.attention_layer(mx.nd.concat(x, context, dim=1))
            outputs.append(attention)
        return self.project(mx.nd.stack(*outputs, axis=1))


class Luong234(mx.lr_scheduler.LRScheduler):
    """NMT's "luong234": after 2/3 of the steps, halve the learning rate 4 times at equal intervals."""

    def __init__(self, learning_rate: float, num_train_steps: int) -> None:
        super().__init__(base_lr=learning_rate)
        self.start = int(num_train_steps * 2 / 3)
        self.every = max(1, int((num_train_steps - self.start) / 4))

    def __call__(self, num_update: int) -> float:
        step = num_update - 1  # MXNet counts the first update as 1
        return self.base_lr * (1.0 if step < self.start else 0.5 ** ((step - self.start) // self.every))


@dataclass
class Training:
    model: Seq2Seq
    trainer: gluon.Trainer
    ctx: mx.Context
    max_norm: float


def build(hp: dict[str, Any], ctx: mx.Context) -> Training:
    if hp["decay_scheme"] != "luong234":
        raise ValueError(f"decay_scheme {hp['decay_scheme']!r} is not implemented; use 'luong234'")
    if hp["optimizer"] != "sgd":
        raise ValueError(f"optimizer {hp['optimizer']!r} is not implemented; use 'sgd'")
    model = Seq2Seq(hp, prefix="seq2seq_")
    w, u = hp["init_weight"], hp["num_units"]
    model.initialize(mx.init.Uniform(w), ctx=ctx)
    model.hybridize(static_alloc=True)  # the cells, embeddings and dense layers; the loops stay Python
    for cell in (model.encoder_fwd, model.encoder_bwd, model.cell1, model.cell2):
        bias = cell.i2h_bias.data(ctx)                                      # TensorFlow's forget_bias, gates i, f, c, o
        bias[u : 2 * u] += hp["forget_bias"]
        cell.i2h_bias.set_data(bias)
    schedule = Luong234(hp["learning_rate"], hp["num_train_steps"])
    trainer = gluon.Trainer(model.collect_params(), "sgd", {"learning_rate": hp["learning_rate"],
                                                            "lr_scheduler": schedule})
    return Training(model, trainer, ctx, hp["max_gradient_norm"])


def to_device(batch: Any, ctx: mx.Context) -> dict[str, Any]:
    return {
        "source": mx.nd.array(batch.source, ctx=ctx),
        "source_lengths": mx.nd.array(batch.source_lengths, ctx=ctx),
        "target_in": mx.nd.array(batch.target_in, ctx=ctx),
        "target_out": mx.nd.array(batch.target_out, ctx=ctx),
    }


def summed_loss(logits: Any, target_out: Any) -> Any:
    """Summed cross-entropy of the target tokens (labels -100 are padding) divided by the batch size."""
    valid = target_out >= 0
    picked = mx.nd.pick(mx.nd.log_softmax(logits, axis=-1), target_out * valid, axis=-1)
    return -(picked * valid).sum() / logits.shape[0]


def forward(training: Training, inputs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The network alone in inference mode (no loss, no update): log-probabilities (N, T, V) and
    target lengths (N,), as NumPy, to compare across frameworks."""
    logits = training.model(inputs["source"], inputs["source_lengths"], inputs["target_in"])
    lengths = (inputs["target_out"] >= 0).sum(axis=1).asnumpy().astype(np.int64)
    return mx.nd.log_softmax(logits, axis=-1).asnumpy(), lengths


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> Any:
    """One SGD step, the global gradient norm clipped; `precision` may scale the loss (AMP on a GPU)."""
    params = [p for p in training.model.collect_params().values() if p.grad_req != "null"]
    with autograd.record():
        logits = training.model(inputs["source"], inputs["source_lengths"], inputs["target_in"])
        loss = summed_loss(logits.astype("float32"), inputs["target_out"])
        with precision.scale_loss(loss, training.trainer) as scaled:
            autograd.backward(scaled)
    grads = [p.grad(training.ctx) for p in params]
    scaler = getattr(training.trainer, "_amp_loss_scaler", None)  # AMP: the gradients are loss-scaled
    gluon.utils.clip_global_norm(grads, training.max_norm * (scaler.loss_scale if scaler else 1.0),
                                 check_isfinite=False)
    training.trainer.step(1)  # the loss is already divided by the batch size
    return loss
