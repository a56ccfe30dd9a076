"""Inception-v3 on PyTorch: torchvision's network with its auxiliary classifier, RMSProp and one
training step.

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
    aux_weight: float


def network(hp: dict[str, Any]) -> nn.Module:
    """torchvision's Inception-v3 with random weights (truncated-normal initialisation)."""
    return torchvision.models.inception_v3(
        weights=None, num_classes=hp["num_classes"], aux_logits=hp["aux_logits"], init_weights=True,
        dropout=hp["dropout"],
    )


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = network(hp).to(device).train()
    optimizer = torch.optim.RMSprop(
        model.parameters(), lr=hp["learning_rate"], alpha=hp["rmsprop_decay"], eps=hp["rmsprop_epsilon"],
        weight_decay=hp["weight_decay"],
    )
    loss = nn.CrossEntropyLoss(label_smoothing=hp["label_smoothing"])
    return Training(model, optimizer, loss, hp["aux_loss_weight"] if hp["aux_logits"] else 0.0)


def objective(training: Training, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross entropy of the main logits plus the weighted auxiliary classifier's."""
    out = training.model(images)
    if isinstance(out, torch.Tensor):  # built without the auxiliary head
        return training.loss(out.float(), labels)
    main = training.loss(out.logits.float(), labels)
    return main + training.aux_weight * training.loss(out.aux_logits.float(), labels)


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One RMSProp step; `precision` supplies autocast() and a GradScaler (a no-op outside AMP)."""
    training.optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        loss = objective(training, inputs["images"], inputs["labels"])
    amp.scaled_update(loss, training.optimizer, precision)
    return loss.detach()
