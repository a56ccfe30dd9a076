"""A3C on PyTorch: the policy/value network of Mnih et al. 2016, the n-step rollout played with
the current policy in the actors' environments, and the advantage actor-critic update.

Every size comes from the hyperparameters handed in (workload.toml); nothing here times,
logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from _shared import torch_amp as amp


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


class PolicyValue(nn.Module):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__()
        c1, k1, s1 = hp["conv1_channels"], hp["conv1_kernel"], hp["conv1_stride"]
        c2, k2, s2 = hp["conv2_channels"], hp["conv2_kernel"], hp["conv2_stride"]
        h = _conv_out(_conv_out(hp["frame_height"], k1, s1), k2, s2)
        w = _conv_out(_conv_out(hp["frame_width"], k1, s1), k2, s2)
        self.body = nn.Sequential(
            nn.Conv2d(hp["frame_stack"], c1, k1, s1), nn.ReLU(), nn.Conv2d(c1, c2, k2, s2), nn.ReLU(),
            nn.Flatten(), nn.Linear(c2 * h * w, hp["hidden"]), nn.ReLU())
        self.policy = nn.Linear(hp["hidden"], hp["actions"])
        self.value = nn.Linear(hp["hidden"], 1)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 frames (N, 4, 84, 84) -> policy logits (N, actions), values (N,)."""
        x = self.body(frames.float() / 255.0)
        return self.policy(x), self.value(x).squeeze(-1)


@dataclass
class Rollout:
    """t_max steps of every actor: observations (T, N, 4, 84, 84), actions, rewards, episode ends
    (T, N), and the observation after the last step (N, 4, 84, 84)."""

    observations: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    last: torch.Tensor


@dataclass
class Training:
    model: PolicyValue
    optimizer: torch.optim.Optimizer
    hp: dict[str, Any]


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = PolicyValue(hp).to(device)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=hp["learning_rate"], alpha=hp["rmsprop_alpha"],
                                    eps=hp["rmsprop_epsilon"])
    return Training(model, optimizer, hp)


def to_device(batch: Any, device: torch.device) -> dict[str, Any]:
    """The rollout to play (a handle to the actors), or for observations without an environment
    (describe's reference sample) the frames on the device."""
    if not hasattr(batch, "actors"):
        return {"frames": torch.from_numpy(batch.features).to(device)}
    return {"actors": batch.actors, "steps": batch.steps, "device": device}


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, Any]:
    """The network alone on observations (no rollout, no update): policy logits and values, as NumPy."""
    with torch.no_grad():
        logits, values = training.model(inputs["frames"])
    return {"logits": logits.cpu().numpy(), "values": values.cpu().numpy()}


def play(training: Training, actors: Any, steps: int, device: torch.device, precision: Any) -> Rollout:
    """The n-step rollout: the current policy gives each action's logits, the actors draw the
    action (in NumPy, the same draws in every framework) and play it."""
    obs = torch.from_numpy(actors.observation).to(device)
    frames, actions, rewards, dones = [], [], [], []
    with torch.no_grad(), precision.autocast():
        for _ in range(steps):
            logits, _ = training.model(obs)
            action = actors.sample(logits.float().cpu().numpy())
            nxt, reward, done = actors.step(action)
            frames.append(obs)
            actions.append(torch.from_numpy(action).to(device))
            rewards.append(torch.from_numpy(reward))
            dones.append(torch.from_numpy(done))
            obs = torch.from_numpy(nxt).to(device)
    return Rollout(torch.stack(frames), torch.stack(actions), torch.stack(rewards).to(device),
                   torch.stack(dones).to(device), obs)


def n_step_returns(rewards: torch.Tensor, dones: torch.Tensor, bootstrap: torch.Tensor, gamma: float) -> torch.Tensor:
    """R_t = r_t + gamma R_{t+1}, cut at episode ends, R_T = V(s_T)."""
    returns, running = torch.empty_like(rewards), bootstrap
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * running * (~dones[t]).float()
        returns[t] = running
    return returns


def update(training: Training, rollout: Rollout, precision: Any) -> torch.Tensor:
    """One gradient step on policy loss - beta x entropy + c x value loss over the rollout."""
    hp, model, optimizer = training.hp, training.model, training.optimizer
    t, n = rollout.actions.shape
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        logits, values = model(torch.cat([rollout.observations.flatten(0, 1), rollout.last]))
    logits, values = logits.float(), values.float()
    returns = n_step_returns(rollout.rewards, rollout.dones, values[t * n:].detach(), hp["gamma"]).flatten()
    values, dist = values[: t * n], torch.distributions.Categorical(logits=logits[: t * n])
    advantage = returns - values
    policy_loss = -(dist.log_prob(rollout.actions.flatten()) * advantage.detach()).mean()
    loss = policy_loss - hp["entropy_beta"] * dist.entropy().mean() + hp["value_loss_coef"] * advantage.pow(2).mean()
    amp.scaled_update(loss, optimizer, precision,
                      clip=lambda: nn.utils.clip_grad_norm_(model.parameters(), hp["max_grad_norm"]))
    return loss.detach()


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> torch.Tensor:
    """Play t_max steps in every actor's environment, then update on that rollout."""
    rollout = play(training, inputs["actors"], inputs["steps"], inputs["device"], precision)
    return update(training, rollout, precision)
