"""The PyTorch update under automatic mixed precision that every PyTorch workload ends its step
with (torch.amp's recipe): backward through the GradScaler, unscale and clip where the model clips
its gradients, step, update the scale. Outside AMP the adapter's GradScaler is disabled and each
call is the plain backward() and optimizer.step()."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def scaled_update(loss: torch.Tensor, optimizer: torch.optim.Optimizer, precision: Any,
                  clip: Callable[[], Any] | None = None) -> None:
    """`precision.scaler` is the adapter's GradScaler; `clip` clips the unscaled gradients."""
    precision.scaler.scale(loss).backward()
    if clip is not None:
        precision.scaler.unscale_(optimizer)
        clip()
    precision.scaler.step(optimizer)
    precision.scaler.update()
