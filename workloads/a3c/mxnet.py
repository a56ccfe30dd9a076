"""A3C on MXNet 1.9 Gluon: the policy/value network of Mnih et al. 2016, the n-step rollout played
with the current policy in the actors' environments, and the advantage actor-critic update.

The same network, loss and algorithm as pytorch.py, from the same hyperparameters (workload.toml);
MXNet's a3c example is the one the TBD paper ran. The actors draw the actions in NumPy
(data.sample_actions). Nothing here times, logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


class PolicyValue(gluon.HybridBlock):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        c1, k1, s1 = hp["conv1_channels"], hp["conv1_kernel"], hp["conv1_stride"]
        c2, k2, s2 = hp["conv2_channels"], hp["conv2_kernel"], hp["conv2_stride"]
        h = _conv_out(_conv_out(hp["frame_height"], k1, s1), k2, s2)
        w = _conv_out(_conv_out(hp["frame_width"], k1, s1), k2, s2)
        with self.name_scope():
            self.conv1 = gluon.nn.Conv2D(c1, k1, s1, activation="relu", in_channels=hp["frame_stack"], prefix="conv1_")
            self.conv2 = gluon.nn.Conv2D(c2, k2, s2, activation="relu", in_channels=c1, prefix="conv2_")
            # flatten=True reads (N, C, H, W) in C, H, W order, as PyTorch's Flatten does
            self.fc = gluon.nn.Dense(hp["hidden"], activation="relu", in_units=c2 * h * w, prefix="fc_")
            self.policy = gluon.nn.Dense(hp["actions"], in_units=hp["hidden"], prefix="policy_")
            self.value = gluon.nn.Dense(1, in_units=hp["hidden"], prefix="value_")

    def hybrid_forward(self, F: Any, frames: Any) -> tuple[Any, Any]:
        """uint8 frames (N, 4, 84, 84) -> policy logits (N, actions), values (N,)."""
        x = self.fc(self.conv2(self.conv1(F.cast(frames, dtype="float32") / 255.0)))
        return self.policy(x), F.reshape(self.value(x), (-1,))


@dataclass
class Training:
    model: PolicyValue
    trainer: gluon.Trainer
    ctx: mx.Context
    hp: dict[str, Any]


def build(hp: dict[str, Any], ctx: mx.Context) -> Training:
    model = PolicyValue(hp, prefix="a3c_")
    model.initialize(mx.init.Xavier(), ctx=ctx)
    model.hybridize(static_alloc=True)
    trainer = gluon.Trainer(model.collect_params(), "rmsprop", {
        "learning_rate": hp["learning_rate"], "gamma1": hp["rmsprop_alpha"], "epsilon": hp["rmsprop_epsilon"],
        "centered": False,
    })
    return Training(model, trainer, ctx, hp)


def to_device(batch: Any, ctx: mx.Context) -> dict[str, Any]:
    """The rollout to play (a handle to the actors), or for observations without an environment
    (describe's reference sample) the frames on `ctx`."""
    if not hasattr(batch, "actors"):
        return {"frames": mx.nd.array(batch.features, ctx=ctx, dtype=np.uint8)}
    return {"actors": batch.actors, "steps": batch.steps, "ctx": ctx}


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The network alone on observations (no rollout, no update): logits and values, as NumPy."""
    logits, values = training.model(inputs["frames"])
    return {"logits": logits.asnumpy(), "values": values.asnumpy()}


@dataclass
class Rollout:
    """t_max steps of every actor: observations (T, N, 4, 84, 84), actions, rewards, episode ends
    (T, N), and the observation after the last step (N, 4, 84, 84)."""

    observations: Any
    actions: Any
    rewards: Any
    dones: Any
    last: Any


def play(training: Training, actors: Any, steps: int, ctx: mx.Context) -> Rollout:
    """The n-step rollout: the current policy gives each action's logits, the actors draw the
    action (in NumPy, the same draws in every framework) and play it."""
    obs = mx.nd.array(actors.observation, ctx=ctx, dtype=np.uint8)
    frames, actions, rewards, dones = [], [], [], []
    for _ in range(steps):
        logits, _ = training.model(obs)
        action = actors.sample(logits.asnumpy())
        nxt, reward, done = actors.step(action)
        frames.append(obs)
        actions.append(action)
        rewards.append(reward)
        dones.append(done)
        obs = mx.nd.array(nxt, ctx=ctx, dtype=np.uint8)

    def on(x: list[np.ndarray]) -> Any:
        return mx.nd.array(np.stack(x), ctx=ctx, dtype=np.float32)
    return Rollout(mx.nd.stack(*frames), on(actions), on(rewards), on(dones), obs)


def n_step_returns(rewards: Any, dones: Any, bootstrap: Any, gamma: float) -> Any:
    """R_t = r_t + gamma R_{t+1}, cut at episode ends, R_T = V(s_T); rewards and dones (T, N)."""
    returns, running = [], bootstrap
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * running * (1.0 - dones[t])
        returns.append(running)
    return mx.nd.stack(*returns[::-1])


def a2c_loss(logits: Any, values: Any, actions: Any, returns: Any, hp: dict[str, Any]) -> Any:
    """Policy loss - beta x entropy + c x value loss, each a mean over the rollout's states."""
    log_probs = mx.nd.log_softmax(logits, axis=-1)
    advantage = returns - values
    policy_loss = -(mx.nd.pick(log_probs, actions, axis=-1) * advantage.detach()).mean()
    entropy = -(mx.nd.exp(log_probs) * log_probs).sum(axis=-1)
    return policy_loss - hp["entropy_beta"] * entropy.mean() + hp["value_loss_coef"] * (advantage ** 2).mean()


def update(training: Training, rollout: Rollout, precision: Any) -> Any:
    """One gradient step on policy loss - beta x entropy + c x value loss over the rollout, the
    gradients clipped to global norm max_grad_norm (after unscaling, under AMP)."""
    hp, model, trainer = training.hp, training.model, training.trainer
    t, n = rollout.actions.shape
    states = rollout.observations.reshape((-3, 0, 0, 0))
    with autograd.record():
        logits, values = model(mx.nd.concat(states, rollout.last, dim=0))
        logits, values = logits.astype("float32"), values.astype("float32")
        returns = n_step_returns(rollout.rewards, rollout.dones, values[t * n:].detach(), hp["gamma"])
        loss = a2c_loss(logits[: t * n], values[: t * n], rollout.actions.reshape((-1,)), returns.reshape((-1,)), hp)
        with precision.scale_loss(loss, trainer) as scaled:
            autograd.backward(scaled)
    precision.clip_global_norm(trainer, model.collect_params().values(), hp["max_grad_norm"])
    trainer.step(1)  # the loss is already a mean
    return loss


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> Any:
    """Play t_max steps in every actor's environment, then update on that rollout."""
    rollout = play(training, inputs["actors"], inputs["steps"], inputs["ctx"])
    return update(training, rollout, precision)
