"""The Covertype MLP on PyTorch: the network, Adam and one training step.

Every size and rate comes from the hyperparameters handed in (workload.toml); nothing here times,
logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from _shared import torch_amp as amp


@dataclass
class Training:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss: nn.CrossEntropyLoss


def network(hp: dict[str, Any]) -> nn.Module:
    widths = [int(hp["num_features"]), *map(int, hp["hidden"])]
    layers: list[nn.Module] = []
    for width_in, width_out in zip(widths, widths[1:]):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(widths[-1], int(hp["num_classes"])))


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = network(hp).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=hp["learning_rate"])
    return Training(model, optimizer, nn.CrossEntropyLoss())


def to_device(batch: Any, device: torch.device) -> dict[str, torch.Tensor]:
    return {
        "features": torch.from_numpy(batch.features).to(device),
        "labels": torch.from_numpy(batch.labels).to(device),
    }


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One Adam step; `precision` supplies autocast() and a GradScaler (a no-op outside AMP)."""
    training.optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        logits = training.model(inputs["features"])
    loss = training.loss(logits.float(), inputs["labels"])
    amp.scaled_update(loss, training.optimizer, precision)
    return loss.detach()


def forward(training: Training, inputs: dict[str, torch.Tensor]) -> np.ndarray:
    """The network alone in inference mode (no loss, no update): logits (N, classes) as NumPy."""
    model = training.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(inputs["features"])
    finally:
        model.train(was_training)
    return logits.cpu().numpy()
