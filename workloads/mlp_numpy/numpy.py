"""The machinery check's network in NumPy: two fully connected layers with a ReLU between, softmax
cross-entropy, the backward pass by hand and plain SGD. The adapter's `precision.reduce` is the data-parallel
hook on the gradients (the identity for one worker, the mean over a job's workers otherwise)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Mlp:
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray

    def parameters(self) -> Iterator[np.ndarray]:
        yield from (self.w1, self.b1, self.w2, self.b2)


@dataclass
class Training:
    model: Mlp
    learning_rate: float


def _dense(fan_in: int, fan_out: int) -> np.ndarray:
    """He-normal weights (the ReLU layer's usual initialization), from NumPy's seeded global generator."""
    return (np.random.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def build(hp: dict[str, Any], device: Any) -> Training:
    features, hidden, classes = int(hp["features"]), int(hp["hidden"]), int(hp["classes"])
    model = Mlp(_dense(features, hidden), np.zeros(hidden, np.float32), _dense(hidden, classes),
                np.zeros(classes, np.float32))
    return Training(model, float(hp["learning_rate"]))


def to_device(batch: Any, device: Any) -> dict[str, np.ndarray]:
    return {"features": batch.features, "labels": batch.labels}


def _logits(model: Mlp, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hidden = np.maximum(features @ model.w1 + model.b1, 0.0)
    return hidden, hidden @ model.w2 + model.b2


def forward(training: Training, inputs: dict[str, np.ndarray]) -> np.ndarray:
    return _logits(training.model, inputs["features"])[1]


def train_step(training: Training, inputs: dict[str, np.ndarray], precision: Any) -> np.float32:
    m, x, y = training.model, inputs["features"], inputs["labels"]
    hidden, logits = _logits(m, x)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    n = len(y)
    loss = -log_probs[np.arange(n), y].mean()
    d_logits = np.exp(log_probs)
    d_logits[np.arange(n), y] -= 1.0
    d_logits /= n
    d_hidden = (d_logits @ m.w2.T) * (hidden > 0)
    grads = precision.reduce([x.T @ d_hidden, d_hidden.sum(axis=0), hidden.T @ d_logits, d_logits.sum(axis=0)])
    for param, grad in zip(m.parameters(), grads):
        param -= training.learning_rate * grad.astype(np.float32)
    return np.float32(loss)
