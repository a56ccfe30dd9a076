"""DiT on PyTorch with diffusers: DiTTransformer2DModel (adaLN-Zero blocks, class-conditional) built from the
hyperparameters handed in (workload.toml), freshly initialized; DDPMScheduler's forward process; AdamW at a
constant rate; the noise-prediction MSE. The VAE is left out: batches are latents.

Nothing here times, logs or profiles, and nothing is downloaded (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from diffusers import DDPMScheduler, DiTTransformer2DModel  # noqa: E402
from torch import nn  # noqa: E402

from _shared import torch_amp as amp
from _shared.torch_inference import inference


def make_model(hp: dict[str, Any]) -> nn.Module:
    return DiTTransformer2DModel(
        num_attention_heads=hp["num_attention_heads"], attention_head_dim=hp["attention_head_dim"],
        in_channels=hp["in_channels"], out_channels=hp["out_channels"], num_layers=hp["num_layers"],
        sample_size=hp["sample_size"], patch_size=hp["patch_size"], num_embeds_ada_norm=hp["num_classes"])


def make_scheduler(hp: dict[str, Any]) -> DDPMScheduler:
    return DDPMScheduler(num_train_timesteps=hp["num_train_timesteps"], beta_start=hp["beta_start"],
                         beta_end=hp["beta_end"], beta_schedule=hp["beta_schedule"])


@dataclass
class Training:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: DDPMScheduler
    in_channels: int


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = make_model(hp).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp["learning_rate"], weight_decay=hp["weight_decay"])
    return Training(model, optimizer, make_scheduler(hp), hp["in_channels"])


def to_device(batch: Any, device: torch.device) -> dict[str, torch.Tensor]:
    nb = device.type == "cuda"
    arrays = {"latents": batch.latents, "labels": batch.labels, "timesteps": batch.timesteps, "noise": batch.noise}
    return {k: torch.from_numpy(v).to(device, non_blocking=nb) for k, v in arrays.items()}


def predict(training: Training, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The noised latents x_t = sqrt(a_t) x_0 + sqrt(1 - a_t) eps, through the network: (N, out_channels, S, S)."""
    noisy = training.scheduler.add_noise(inputs["latents"], inputs["noise"], inputs["timesteps"])
    return training.model(noisy, timestep=inputs["timesteps"], class_labels=inputs["labels"]).sample


def forward(training: Training, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The network alone in inference mode (no loss, no update): its prediction, as NumPy."""
    with inference(training.model):
        out = predict(training, inputs)
    return {"prediction": out.float().cpu().numpy()}


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One AdamW step on the MSE between the predicted and the drawn noise (the first in_channels outputs)."""
    training.optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        out = predict(training, inputs)
    loss = F.mse_loss(out[:, : training.in_channels].float(), inputs["noise"])
    amp.scaled_update(loss, training.optimizer, precision)
    return loss.detach()
