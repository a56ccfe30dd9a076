"""MiniGo on PyTorch: the residual policy/value network of minigo's dual_net.py, SGD with
momentum and L2 on the kernels, and one training step on a batch of positions.

Every size comes from the hyperparameters handed in (workload.toml); nothing here times,
logs or profiles.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from _shared import torch_amp as amp


def _bn(hp: dict[str, Any], channels: int, affine: bool = True) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=hp["batchnorm_epsilon"], momentum=1.0 - hp["batchnorm_momentum"],
                          affine=affine)


def _conv_bn(hp: dict[str, Any], cin: int, cout: int, kernel: int, affine: bool = True) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=False), _bn(hp, cout, affine)]


class Residual(nn.Module):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__()
        w = hp["conv_width"]
        self.inner = nn.Sequential(*_conv_bn(hp, w, w, 3), nn.ReLU(), *_conv_bn(hp, w, w, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.inner(x))


class DualNet(nn.Module):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__()
        n, w = hp["board_size"], hp["conv_width"]
        planes = 2 * hp["history"] + 1
        self.trunk = nn.Sequential(*_conv_bn(hp, planes, w, 3), nn.ReLU(), *[Residual(hp) for _ in range(hp["trunk_layers"])])
        pw, vw = hp["policy_conv_width"], hp["value_conv_width"]
        self.policy = nn.Sequential(*_conv_bn(hp, w, pw, 1, affine=False), nn.ReLU(), nn.Flatten(),
                                    nn.Linear(pw * n * n, n * n + 1))
        self.value = nn.Sequential(*_conv_bn(hp, w, vw, 1, affine=False), nn.ReLU(), nn.Flatten(),
                                   nn.Linear(vw * n * n, hp["fc_width"]), nn.ReLU(), nn.Linear(hp["fc_width"], 1), nn.Tanh())

    def forward(self, planes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.trunk(planes)
        return self.policy(x), self.value(x).squeeze(-1)


def piecewise(boundaries: list[int], rates: list[float]) -> Any:
    """The learning rate as a multiple of rates[0]: rates[i] once step >= boundaries[i - 1]."""
    return lambda step: rates[bisect.bisect_right(boundaries, step)] / rates[0]


@dataclass
class Training:
    model: DualNet
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    value_weight: float
    l2: float


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = DualNet(hp).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=hp["lr_rates"][0], momentum=hp["sgd_momentum"])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, piecewise(hp["lr_boundaries"], hp["lr_rates"]))
    return Training(model, optimizer, schedule, hp["value_cost_weight"], hp["l2_strength"])


def to_device(batch: Any, device: torch.device) -> dict[str, torch.Tensor]:
    nb = device.type == "cuda"
    return {"features": torch.from_numpy(batch.features).to(device, non_blocking=nb),
            "moves": torch.from_numpy(batch.moves).to(device, non_blocking=nb),
            "values": torch.from_numpy(batch.values).to(device, non_blocking=nb)}


def forward(training: Training, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The network alone in inference mode (no loss, no update): logits and values, as NumPy."""
    model = training.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits, values = model(inputs["features"])
    finally:
        model.train(was_training)
    return {"logits": logits.cpu().numpy(), "values": values.cpu().numpy()}


def l2_penalty(model: nn.Module) -> torch.Tensor:
    """Sum of squared conv and dense kernels (Keras' l2 regularizer; biases and batch norm excluded)."""
    return sum(m.weight.pow(2).sum() for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear)))


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One SGD step on policy cross-entropy + value MSE + L2."""
    model, optimizer = training.model, training.optimizer
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        logits, value = model(inputs["features"])
    policy_cost = nn.functional.cross_entropy(logits.float(), inputs["moves"])
    value_cost = (value.float() - inputs["values"]).pow(2).mean()
    loss = policy_cost + training.value_weight * value_cost + training.l2 * l2_penalty(model)
    amp.scaled_update(loss, optimizer, precision)
    training.schedule.step()
    return loss.detach()
