"""WGAN-GP on PyTorch: the 64x64 ResNet generator and critic of gan_64x64.py, Adam, and one
training iteration (critic_iters critic updates with the gradient penalty, then one generator
update).

Every size and rate comes from the hyperparameters handed in (workload.toml); nothing here
times, logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from _shared import torch_amp as amp

Norm = Callable[[int], nn.Module]


def critic_norm(channels: int) -> nn.Module:
    """Layer norm over (C, H, W) with a per-channel scale and offset (tflib's Layernorm)."""
    return nn.GroupNorm(1, channels)


class ResidualBlock(nn.Module):
    """gan_64x64.py's ResidualBlock: norm, ReLU, conv, norm, ReLU, conv, plus a 1x1 shortcut;
    'up' upsamples (nearest) before the first conv, 'down' mean-pools after the second."""

    def __init__(self, cin: int, cout: int, resample: str, norm: Norm) -> None:
        super().__init__()
        if resample == "up":
            self.shortcut = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(cin, cout, 1))
            conv1 = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(cin, cout, 3, padding=1, bias=False))
            conv2: nn.Module = nn.Conv2d(cout, cout, 3, padding=1)
            mid = cout
        elif resample == "down":
            self.shortcut = nn.Sequential(nn.AvgPool2d(2), nn.Conv2d(cin, cout, 1))
            conv1 = nn.Sequential(nn.Conv2d(cin, cin, 3, padding=1, bias=False))
            conv2 = nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.AvgPool2d(2))
            mid = cin
        else:
            raise ValueError(f"resample must be 'up' or 'down', got {resample!r}")
        self.residual = nn.Sequential(norm(cin), nn.ReLU(), conv1, norm(mid), nn.ReLU(), conv2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shortcut(x) + self.residual(x)


class Generator(nn.Module):
    """Noise -> 4x4x(8 DIM) -> four upsampling blocks -> BN, ReLU, 3x3 conv -> tanh (3x64x64)."""

    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__()
        d = hp["dim"]
        self.top = 8 * d
        self.input = nn.Linear(hp["noise_dim"], 4 * 4 * 8 * d)
        widths = [8 * d, 8 * d, 4 * d, 2 * d, d]
        self.blocks = nn.Sequential(
            *(ResidualBlock(a, b, "up", nn.BatchNorm2d) for a, b in zip(widths, widths[1:])))
        self.output = nn.Sequential(nn.BatchNorm2d(d), nn.ReLU(), nn.Conv2d(d, 3, 3, padding=1), nn.Tanh())

    def forward(self, noise: torch.Tensor) -> torch.Tensor:
        x = self.input(noise).view(-1, self.top, 4, 4)
        return self.output(self.blocks(x))


class Critic(nn.Module):
    """3x64x64 -> 3x3 conv -> four downsampling blocks (layer norm) -> linear -> one score."""

    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__()
        d = hp["dim"]
        widths = [d, 2 * d, 4 * d, 8 * d, 8 * d]
        self.input = nn.Conv2d(3, d, 3, padding=1)
        self.blocks = nn.Sequential(
            *(ResidualBlock(a, b, "down", critic_norm) for a, b in zip(widths, widths[1:])))
        self.output = nn.Linear(4 * 4 * 8 * d, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.output(self.blocks(self.input(images)).flatten(1)).view(-1)


class Pair(nn.Module):
    """Both networks, so that the kit counts every trained parameter."""

    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__()
        self.generator, self.critic = Generator(hp), Critic(hp)


@dataclass
class Training:
    model: Pair
    g_optimizer: torch.optim.Optimizer
    c_optimizer: torch.optim.Optimizer
    noise_dim: int
    gp_lambda: float


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = Pair(hp).to(device).train()
    betas = tuple(hp["adam_betas"])

    def adam(module: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(module.parameters(), lr=hp["learning_rate"], betas=betas, eps=hp["adam_epsilon"])

    return Training(model, adam(model.generator), adam(model.critic), hp["noise_dim"], hp["gp_lambda"])


def to_device(batch: Any, device: torch.device) -> dict[str, torch.Tensor]:
    """The batch's real images, (critic_iters, N, 3, 64, 64) in [-1, 1]."""
    return {"real": torch.from_numpy(batch.images).to(device, non_blocking=device.type == "cuda")}


def _noise(training: Training, n: int, like: torch.Tensor) -> torch.Tensor:
    return torch.randn(n, training.noise_dim, device=like.device)


def gradient_penalty(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor, precision: Any) -> torch.Tensor:
    """E[(||grad D(x_hat)||_2 - 1)^2] at random interpolates of real and fake images; under AMP
    the gradient is taken of the scaled score and unscaled (PyTorch's AMP gradient-penalty recipe)."""
    alpha = torch.rand(real.shape[0], 1, 1, 1, device=real.device)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    with precision.autocast():
        score = critic(mixed).float().sum()
    (grad,) = torch.autograd.grad(precision.scaler.scale(score), mixed, create_graph=True)
    grad = grad / precision.scaler.get_scale() if precision.scaler.is_enabled() else grad
    return ((grad.flatten(1).norm(2, dim=1) - 1) ** 2).mean()


def critic_step(training: Training, real: torch.Tensor, precision: Any) -> torch.Tensor:
    generator, critic = training.model.generator, training.model.critic
    with torch.no_grad(), precision.autocast():
        fake = generator(_noise(training, real.shape[0], real)).float()
    with precision.autocast():
        wasserstein = critic(fake).float().mean() - critic(real).float().mean()
    loss = wasserstein + training.gp_lambda * gradient_penalty(critic, real, fake, precision)
    training.c_optimizer.zero_grad(set_to_none=True)
    amp.scaled_update(loss, training.c_optimizer, precision)
    return loss.detach()


def generator_step(training: Training, n: int, like: torch.Tensor, precision: Any) -> torch.Tensor:
    generator, critic = training.model.generator, training.model.critic
    critic.requires_grad_(False)  # the generator's update needs no critic gradients
    try:
        with precision.autocast():
            loss = -critic(generator(_noise(training, n, like))).float().mean()
        training.g_optimizer.zero_grad(set_to_none=True)
        amp.scaled_update(loss, training.g_optimizer, precision)
    finally:
        critic.requires_grad_(True)
    return loss.detach()


def forward(training: Training, inputs: dict[str, torch.Tensor]) -> Any:
    """Both networks in inference mode (no loss, no update): the critic's scores (n,) of images the
    generator makes from fixed NumPy noise, one per real image of the first slice, as NumPy."""
    model = training.model
    was_training = model.training
    model.eval()
    noise = np.random.default_rng(0).standard_normal((inputs["real"].shape[1], training.noise_dim), dtype=np.float32)
    try:
        with torch.no_grad():
            scores = model.critic(model.generator(torch.from_numpy(noise).to(inputs["real"].device)))
    finally:
        model.train(was_training)
    return scores.cpu().numpy()


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One WGAN-GP iteration: a critic update per slice of real images, then a generator update.
    Returns the last critic loss (negative Wasserstein estimate plus the weighted penalty)."""
    real = inputs["real"]
    losses = [critic_step(training, real[i], precision) for i in range(real.shape[0])]
    generator_step(training, real.shape[1], real, precision)
    return losses[-1]
