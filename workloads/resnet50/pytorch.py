"""ResNet-50 v1.5 on PyTorch: torchvision's network, SGD with momentum and one training step.

Every size and rate comes from the hyperparameters handed in (workload.toml); nothing here
times, logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torchvision
from torch import nn

from _shared import torch_amp as amp
from _shared import torch_classifier as classifier

# the batch layout and the inference pass are the shared classifier's (workloads/_shared)
to_device, forward = classifier.to_device, classifier.forward


@dataclass
class Training:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss: nn.CrossEntropyLoss


def network(hp: dict[str, Any]) -> nn.Module:
    """torchvision's ResNet-50 (v1.5) with random weights."""
    return torchvision.models.resnet50(weights=None, num_classes=hp["num_classes"])


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = network(hp).to(device).train()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=hp["learning_rate"], momentum=hp["momentum"], weight_decay=hp["weight_decay"]
    )
    return Training(model, optimizer, nn.CrossEntropyLoss(label_smoothing=hp["label_smoothing"]))


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One SGD step; `precision` supplies autocast() and a GradScaler (a no-op outside AMP)."""
    training.optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        logits = training.model(inputs["images"])
    loss = training.loss(logits.float(), inputs["labels"])
    amp.scaled_update(loss, training.optimizer, precision)
    return loss.detach()
