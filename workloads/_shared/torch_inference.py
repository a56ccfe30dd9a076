"""The PyTorch inference pass the transformer workloads share (Llama, DiT): the network in eval mode
without gradients, its training mode restored after."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def inference(model: torch.nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)
