"""Deep Speech 2 on MXNet 1.9 Gluon: the network, its optimizer and one training step.

The same network as pytorch.py, from the same hyperparameters (workload.toml). Each bidirectional
GRU layer is two one-direction GRUs: MXNet's fused bidirectional GRU ignores `sequence_length` in
its backward direction on the CPU (it starts at the padded end), so the backward GRU reads each
utterance reversed within its own length (SequenceReverse), like PyTorch's packed sequences.
Nothing here times, logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon


def _conv_out(length: Any, kernel: int, stride: int) -> Any:
    return (length + 2 * (kernel // 2) - kernel) // stride + 1


class ClippedReLU(gluon.HybridBlock):
    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return F.clip(x, 0.0, 20.0)


class BiGRU(gluon.HybridBlock):
    """One bidirectional GRU layer over (T, N, C) with per-utterance lengths; outputs [forward, backward]."""

    def __init__(self, hidden: int, input_size: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.fwd = gluon.rnn.GRU(hidden, layout="TNC", input_size=input_size, prefix="fwd_")
            self.bwd = gluon.rnn.GRU(hidden, layout="TNC", input_size=input_size, prefix="bwd_")
        self.fwd.direction, self.bwd.direction = "forward", "backward"

    def hybrid_forward(self, F: Any, x: Any, lengths: Any) -> Any:
        reverse = lambda y: F.SequenceReverse(y, sequence_length=lengths, use_sequence_length=True)  # noqa: E731
        return F.concat(self.fwd(x), reverse(self.bwd(reverse(x))), dim=2)


class DeepSpeech2(gluon.HybridBlock):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        c, bn = hp["conv_channels"], bool(hp["conv_batchnorm"])
        self.k1, self.s1 = hp["conv1_kernel"], hp["conv1_stride"]
        self.k2, self.s2 = hp["conv2_kernel"], hp["conv2_stride"]
        freq = _conv_out(_conv_out(hp["frequency_bins"], self.k1[0], self.s1[0]), self.k2[0], self.s2[0])
        hidden = hp["rnn_hidden"]
        with self.name_scope():
            self.conv = gluon.nn.HybridSequential(prefix="conv_")
            with self.conv.name_scope():
                for cin, k, s in ((1, self.k1, self.s1), (c, self.k2, self.s2)):
                    self.conv.add(gluon.nn.Conv2D(c, tuple(k), tuple(s), padding=(k[0] // 2, k[1] // 2),
                                                  use_bias=not bn, in_channels=cin))
                    if bn:
                        self.conv.add(gluon.nn.BatchNorm(axis=1, momentum=0.9, epsilon=1e-5, in_channels=c))
                    self.conv.add(ClippedReLU())
            self.rnn = gluon.nn.HybridSequential(prefix="rnn_")
            with self.rnn.name_scope():
                for i in range(hp["rnn_layers"]):
                    self.rnn.add(BiGRU(hidden, c * freq if i == 0 else 2 * hidden, prefix=f"bigru{i}_"))
            self.fc = gluon.nn.Dense(hp["fc_hidden"], activation="relu", flatten=False, in_units=2 * hidden,
                                     prefix="fc_")
            self.out = gluon.nn.Dense(len(hp["alphabet"]), flatten=False, in_units=hp["fc_hidden"], prefix="out_")

    def output_lengths(self, F: Any, frames: Any) -> Any:
        def out(x: Any, k: int, s: int) -> Any:
            return F.floor((x + 2 * (k // 2) - k) / s) + 1
        return out(out(frames, self.k1[1], self.s1[1]), self.k2[1], self.s2[1])

    def hybrid_forward(self, F: Any, features: Any, frames: Any) -> tuple[Any, Any]:
        x = self.conv(features)                                     # (N, C, F', T')
        x = F.transpose(F.reshape(x, (0, -3, 0)), (2, 0, 1))        # (T', N, C*F')
        lengths = self.output_lengths(F, frames)
        for layer in self.rnn:
            x = layer(x, lengths)
        return self.out(self.fc(x)), lengths                        # logits (T', N, V); CTC applies softmax


@dataclass
class Training:
    model: DeepSpeech2
    trainer: gluon.Trainer
    ctx: mx.Context


def build(hp: dict[str, Any], ctx: mx.Context) -> Training:
    model = DeepSpeech2(hp, prefix="deepspeech2_")
    model.initialize(mx.init.Xavier(), ctx=ctx)
    model.hybridize(static_alloc=True)
    trainer = gluon.Trainer(model.collect_params(), "sgd", {
        "learning_rate": hp["learning_rate"], "momentum": hp["momentum"], "wd": hp["weight_decay"],
        "clip_gradient": hp["clip_gradient_value"],  # clips each gradient value, like clip_grad_value_
    })
    return Training(model, trainer, ctx)


def to_device(batch: Any, ctx: mx.Context) -> dict[str, Any]:
    """The NumPy batch on `ctx`; the concatenated targets become a matrix padded with 0 (the blank)."""
    ends = np.cumsum(batch.label_lengths)
    padded = np.zeros((len(batch.label_lengths), int(batch.label_lengths.max())), dtype=np.float32)
    for i, (start, end) in enumerate(zip(ends - batch.label_lengths, ends)):
        padded[i, : end - start] = batch.labels[start:end]
    return {
        "features": mx.nd.array(batch.features, ctx=ctx),
        "frames": mx.nd.array(batch.feature_lengths, ctx=ctx),
        "labels": mx.nd.array(padded, ctx=ctx),
        "label_lengths": mx.nd.array(batch.label_lengths, ctx=ctx),
    }


def ctc_mean(logits: Any, lengths: Any, labels: Any, label_lengths: Any) -> Any:
    """PyTorch's CTCLoss 'mean': each utterance's loss divided by its target length, then the batch mean."""
    per_utt = mx.nd.ctc_loss(logits, labels, lengths, label_lengths, use_data_lengths=True,
                             use_label_lengths=True, blank_label="first")
    return (per_utt / label_lengths).mean()


def forward(training: Training, inputs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The network alone in inference mode (no loss, no update): log-probabilities (N, T', V) and
    output lengths (N,), as NumPy, to compare across frameworks."""
    logits, lengths = training.model(inputs["features"], inputs["frames"])
    return mx.nd.log_softmax(logits, axis=-1).transpose((1, 0, 2)).asnumpy(), lengths.asnumpy().astype(np.int64)


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> Any:
    """One SGD step; `precision` may scale the loss (AMP on a GPU) and otherwise leaves it be."""
    with autograd.record():
        logits, lengths = training.model(inputs["features"], inputs["frames"])
        loss = ctc_mean(logits.astype("float32"), lengths, inputs["labels"], inputs["label_lengths"])
        with precision.scale_loss(loss, training.trainer) as scaled:
            autograd.backward(scaled)
    training.trainer.step(1)  # the loss is already a batch mean
    return loss
