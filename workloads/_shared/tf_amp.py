"""The TensorFlow update under mixed precision that every TensorFlow workload ends its step with
(Keras' recipe): the loss scaled by the optimizer, the gradients of the scaled loss, the update. Under
AMP the adapter wraps the optimizer in a LossScaleOptimizer, whose `apply` unscales the gradients and
skips the step when they overflow; any other optimizer's `scale_loss` returns the loss unchanged (or
multiplied by its `loss_scale_factor`), so outside AMP this is the plain gradient and update.

Under a tf.distribute strategy (--one-process's MirroredStrategy, several workers' MultiWorkerMirroredStrategy)
the optimizer sums the replicas' gradients; each replica's loss is divided by the replicas here, so that
the sum is the mean, as DDP's and MXNet's averaging (one replica: unchanged).

Every TensorFlow workload builds its optimizer for the variables its update takes (`built`) before the
step's first call, as Keras' own `fit` does: a tf.function that creates variables in its first trace is
traced twice (once creating them, once more without), and that second trace cost a third of
EfficientDet's first step on a CPU (61 s against 40 s)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf


def scaled_update(tape: tf.GradientTape, loss: tf.Tensor, optimizer: Any, variables: Sequence[tf.Variable]) -> None:
    """`tape` recorded `loss` (and has been exited); the replica's share and the scaling are recorded on it
    too (a tape may be re-entered until its gradient is taken), then its gradient over `variables` updates them."""
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    with tape:
        scaled = optimizer.scale_loss(loss / replicas if replicas > 1 else loss)
    optimizer.apply(tape.gradient(scaled, variables), variables)


def built(optimizer: Any, variables: Sequence[tf.Variable]) -> Any:
    """`optimizer` with its variables (slots, step counter, a loss scale) made now, outside any tf.function,
    for exactly the `variables` its update will take; their values are those a first update would make."""
    optimizer.build(list(variables))
    return optimizer
