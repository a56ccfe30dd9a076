"""ViT-B/16 on PyTorch: torchvision's VisionTransformer (vit_b_16's values from workload.toml), AdamW with
DeiT's rate, decay and label smoothing, a linear warm-up and cosine schedule, one training step.

Nothing here times, logs or profiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torchvision.models.vision_transformer import VisionTransformer

from _shared import torch_amp as amp
from _shared import torch_classifier as classifier

# the batch layout and the inference pass are the shared classifier's (workloads/_shared)
to_device, forward = classifier.to_device, classifier.forward

NETWORK_KEYS = ("image_size", "patch_size", "num_layers", "num_heads", "hidden_dim", "mlp_dim", "num_classes",
                "dropout", "attention_dropout")


@dataclass
class Training:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    loss: nn.CrossEntropyLoss


def network(hp: dict[str, Any]) -> nn.Module:
    """torchvision's ViT with random weights (vit_b_16 is VisionTransformer(224, 16, 12, 12, 768, 3072))."""
    return VisionTransformer(**{k: hp[k] for k in NETWORK_KEYS})


def warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """DeiT's timm schedule: linear warm-up, then a cosine to 0 at `total` steps."""
    def factor(step: int) -> float:
        if step + 1 < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step + 1 - warmup) / max(1, total - warmup))))
    return factor


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = network(hp).to(device).train()
    # DeiT (timm's optimizer factory) exempts biases, norms, the class token and positions from weight decay
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1 or n in ("class_token", "encoder.pos_embedding")]
    decay = [p for n, p in model.named_parameters() if not (p.ndim <= 1 or n in ("class_token", "encoder.pos_embedding"))]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": hp["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=hp["learning_rate"], eps=hp["adam_epsilon"])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(hp["warmup_steps"], hp["num_train_steps"]))
    return Training(model, optimizer, schedule, nn.CrossEntropyLoss(label_smoothing=hp["label_smoothing"]))


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One AdamW step on the label-smoothed cross-entropy."""
    training.optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        logits = training.model(inputs["images"])
    loss = training.loss(logits.float(), inputs["labels"])
    amp.scaled_update(loss, training.optimizer, precision)
    training.schedule.step()
    return loss.detach()
