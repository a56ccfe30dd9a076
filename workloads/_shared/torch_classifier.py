"""What the PyTorch image classifiers share (ResNet-50, Inception-v3): the batch on the device and
the network's inference-mode logits."""

from __future__ import annotations

from typing import Any

import torch


def to_device(batch: Any, device: torch.device) -> dict[str, torch.Tensor]:
    non_blocking = device.type == "cuda"
    return {
        "images": torch.from_numpy(batch.images).to(device, non_blocking=non_blocking),
        "labels": torch.from_numpy(batch.labels).to(device, non_blocking=non_blocking),
    }


def forward(training: Any, inputs: dict[str, torch.Tensor]) -> Any:
    """The network alone in inference mode (no loss, no update): logits (N, classes) as NumPy, to
    compare across frameworks."""
    model = training.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(inputs["images"])
    finally:
        model.train(was_training)
    return logits.cpu().numpy()
