"""The training half the MXNet image classifiers share (ResNet-50, Inception-v3): softmax cross
entropy with PyTorch's label smoothing and one optimizer step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon


def targets(labels: Any, classes: int, smoothing: float) -> Any:
    """Class indices, or PyTorch's smoothed targets (1 - e) one-hot + e / classes."""
    if smoothing == 0.0:
        return labels
    return mx.nd.one_hot(labels, classes) * (1.0 - smoothing) + smoothing / classes


@dataclass
class Training:
    model: gluon.HybridBlock
    trainer: gluon.Trainer
    classes: int
    smoothing: float
    aux_weight: float = 0.0

    @property
    def loss(self) -> gluon.loss.Loss:
        return gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=self.smoothing == 0.0)


def to_device(batch: Any, ctx: mx.Context) -> dict[str, Any]:
    return {"images": mx.nd.array(batch.images, ctx=ctx), "labels": mx.nd.array(batch.labels, ctx=ctx)}


def forward(training: Training, inputs: dict[str, Any]) -> np.ndarray:
    """The network alone in inference mode: logits (N, classes) as NumPy."""
    return training.model(inputs["images"]).asnumpy()


def train_step(training: Training, inputs: dict[str, Any] | list[dict[str, Any]], precision: Any) -> Any:
    """One optimizer step on the mean cross entropy (plus aux_weight x the auxiliary head's when the
    model returns (logits, aux_logits) while recording); `precision` may scale the loss (AMP on a GPU).
    `inputs` may be a list of parts, one per replica's context (the adapter's --one-process): each
    part's loss is its mean, the trainer's kvstore sums their gradients and the step divides by the
    parts, so the update is the mean over the whole batch. The loss returned is the parts' mean."""
    parts = inputs if isinstance(inputs, list) else [inputs]
    criterion = training.loss
    losses = []
    with autograd.record():
        for part in parts:
            labels = targets(part["labels"], training.classes, training.smoothing)
            out = training.model(part["images"])
            heads = [(out[0], 1.0), (out[1], training.aux_weight)] if isinstance(out, (tuple, list)) else [(out, 1.0)]
            losses.append(sum(weight * criterion(logits.astype("float32"), labels).mean() for logits, weight in heads))
        # one backward over every part (MXNet's AMP scales a list of losses as it does one)
        with precision.scale_loss(losses if len(losses) > 1 else losses[0], training.trainer) as scaled:
            autograd.backward(scaled)
    training.trainer.step(len(parts))  # each part's loss is already its batch mean
    if len(losses) == 1:
        return losses[0]
    first = losses[0].context
    return sum(loss.as_in_context(first) for loss in losses) / len(losses)
