"""A3C on TensorFlow 2 / Keras 3: the policy/value network of Mnih et al. 2016, the n-step rollout
played with the current policy in the actors' environments, and the advantage actor-critic update.

The same network, loss and algorithm as pytorch.py, from the same hyperparameters (workload.toml).
Convolutions run channels-last (TensorFlow's CPU kernels need NHWC); their output is flattened in
channels-first order, as in the other frameworks, so the fully connected layer's weights mean the
same thing. The actors draw the actions in NumPy (data.sample_actions). Nothing here times, logs or
profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from _shared.tf_amp import built, scaled_update


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


class PolicyValue(keras.Model):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="a3c")
        self.c1, self.k1, self.s1 = hp["conv1_channels"], hp["conv1_kernel"], hp["conv1_stride"]
        self.c2, self.k2, self.s2 = hp["conv2_channels"], hp["conv2_kernel"], hp["conv2_stride"]
        self.stack, self.height, self.width = hp["frame_stack"], hp["frame_height"], hp["frame_width"]
        self.conv1 = keras.layers.Conv2D(self.c1, self.k1, self.s1, padding="valid", activation="relu", name="conv1")
        self.conv2 = keras.layers.Conv2D(self.c2, self.k2, self.s2, padding="valid", activation="relu", name="conv2")
        self.fc = keras.layers.Dense(hp["hidden"], activation="relu", name="fc")
        self.policy = keras.layers.Dense(hp["actions"], name="policy")
        self.value = keras.layers.Dense(1, name="value")
        self.build((None, self.stack, self.height, self.width))

    def build(self, input_shape: Any) -> None:
        h1, w1 = _conv_out(self.height, self.k1, self.s1), _conv_out(self.width, self.k1, self.s1)
        h2, w2 = _conv_out(h1, self.k2, self.s2), _conv_out(w1, self.k2, self.s2)
        self.conv1.build((None, self.height, self.width, self.stack))
        self.conv2.build((None, h1, w1, self.c1))
        self.fc.build((None, self.c2 * h2 * w2))
        self.policy.build((None, self.fc.units))
        self.value.build((None, self.fc.units))
        self.built = True

    def call(self, frames: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """uint8 frames (N, 4, 84, 84) -> policy logits (N, actions), values (N,), in float32."""
        x = tf.cast(tf.transpose(frames, (0, 2, 3, 1)), self.compute_dtype) / 255.0  # channels last
        x = self.conv2(self.conv1(x))
        x = tf.reshape(tf.transpose(x, (0, 3, 1, 2)), (tf.shape(x)[0], -1))       # flattened as (C, H, W)
        x = self.fc(x)
        return tf.cast(self.policy(x), tf.float32), tf.cast(self.value(x)[:, 0], tf.float32)


@dataclass
class Training:
    model: PolicyValue
    optimizer: keras.optimizers.Optimizer
    policy: Any   # compiled: observations -> logits
    update: Any   # compiled: one gradient step on a rollout


def n_step_returns(rewards: tf.Tensor, dones: tf.Tensor, bootstrap: tf.Tensor, gamma: float) -> tf.Tensor:
    """R_t = r_t + gamma R_{t+1}, cut at episode ends, R_T = V(s_T); rewards and dones (T, N) with T static."""
    returns, running = [], bootstrap
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * running * (1.0 - tf.cast(dones[t], tf.float32))
        returns.append(running)
    return tf.stack(returns[::-1])


def a2c_loss(logits: tf.Tensor, values: tf.Tensor, actions: tf.Tensor, returns: tf.Tensor,
             hp: dict[str, Any]) -> tf.Tensor:
    """Policy loss - beta x entropy + c x value loss, each a mean over the rollout's states."""
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    advantage = returns - values
    chosen = tf.gather(log_probs, actions, batch_dims=1)
    policy_loss = -tf.reduce_mean(chosen * tf.stop_gradient(advantage))
    entropy = -tf.reduce_sum(tf.exp(log_probs) * log_probs, axis=-1)
    return (policy_loss - hp["entropy_beta"] * tf.reduce_mean(entropy)
            + hp["value_loss_coef"] * tf.reduce_mean(tf.square(advantage)))


def build(hp: dict[str, Any], precision: Any) -> Training:
    """`precision` sets the Keras dtype policy before the layers exist and may wrap the optimizer."""
    model = PolicyValue(hp)
    optimizer = keras.optimizers.RMSprop(learning_rate=hp["learning_rate"], rho=hp["rmsprop_alpha"],
                                         epsilon=hp["rmsprop_epsilon"], global_clipnorm=hp["max_grad_norm"])
    optimizer = built(precision.wrap_optimizer(optimizer), model.trainable_variables)
    frames = (hp["frame_stack"], hp["frame_height"], hp["frame_width"])
    t_max = hp["t_max"]

    @tf.function(input_signature=[tf.TensorSpec((None, *frames), tf.uint8)])
    def policy(observations: tf.Tensor) -> tf.Tensor:
        return model(observations, training=False)[0]

    @tf.function(input_signature=[tf.TensorSpec((t_max, None, *frames), tf.uint8),
                                  tf.TensorSpec((None, *frames), tf.uint8),
                                  tf.TensorSpec((t_max, None), tf.int32), tf.TensorSpec((t_max, None), tf.float32),
                                  tf.TensorSpec((t_max, None), tf.bool)])
    def update(observations: tf.Tensor, last: tf.Tensor, actions: tf.Tensor, rewards: tf.Tensor,
               dones: tf.Tensor) -> tf.Tensor:
        n = tf.shape(last)[0]
        states = tf.reshape(observations, (-1, *frames))
        with tf.GradientTape() as tape:
            logits, values = model(tf.concat([states, last], axis=0), training=True)
            returns = n_step_returns(rewards, dones, tf.stop_gradient(values[t_max * n:]), hp["gamma"])
            loss = a2c_loss(logits[: t_max * n], values[: t_max * n], tf.reshape(actions, (-1,)),
                            tf.reshape(returns, (-1,)), hp)
        scaled_update(tape, loss, optimizer, model.trainable_variables)  # clipped to global norm max_grad_norm first
        return loss

    return Training(model, optimizer, policy, update)


def to_device(batch: Any, device: str) -> dict[str, Any]:
    """The rollout to play (a handle to the actors), or for observations without an environment
    (describe's reference sample) the frames on the device."""
    if not hasattr(batch, "actors"):
        with tf.device(device):
            return {"frames": tf.constant(batch.features)}
    return {"actors": batch.actors, "steps": batch.steps, "device": device}


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The network alone on observations, run eagerly (no rollout, no update): logits and values, as NumPy."""
    logits, values = training.model(inputs["frames"], training=False)
    return {"logits": logits.numpy(), "values": values.numpy()}


@dataclass
class Rollout:
    """t_max steps of every actor: observations (T, N, 4, 84, 84), actions, rewards, episode ends
    (T, N), and the observation after the last step (N, 4, 84, 84)."""

    observations: tf.Tensor
    actions: tf.Tensor
    rewards: tf.Tensor
    dones: tf.Tensor
    last: tf.Tensor


def play(training: Training, actors: Any, steps: int, device: str) -> Rollout:
    """The n-step rollout: the current policy gives each action's logits, the actors draw the
    action (in NumPy, the same draws in every framework) and play it."""
    with tf.device(device):
        obs = tf.constant(actors.observation)
        frames, actions, rewards, dones = [], [], [], []
        for _ in range(steps):
            action = actors.sample(training.policy(obs).numpy())
            nxt, reward, done = actors.step(action)
            frames.append(obs)
            actions.append(action.astype(np.int32))
            rewards.append(reward)
            dones.append(done)
            obs = tf.constant(nxt)
        return Rollout(tf.stack(frames), tf.constant(np.stack(actions)), tf.constant(np.stack(rewards)),
                       tf.constant(np.stack(dones)), obs)


def update(training: Training, rollout: Rollout) -> tf.Tensor:
    """One gradient step on policy loss - beta x entropy + c x value loss over the rollout."""
    return training.update(rollout.observations, rollout.last, rollout.actions, rollout.rewards, rollout.dones)


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> tf.Tensor:
    """Play t_max steps in every actor's environment, then update on that rollout; the math mode is
    set by the adapter."""
    rollout = play(training, inputs["actors"], inputs["steps"], inputs["device"])
    return update(training, rollout)
