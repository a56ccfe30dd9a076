"""A3C on TensorFlow with the live Pong environment: the paper's network size, n-step returns, the
rollout played by actor processes, the update (loss falls on a fixed rollout), the math modes.
Runs in the TensorFlow stack (`make test-tensorflow`)."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tbdkit.spec import catalog
from tbdkit.adapters.tensorflow import Precision, TensorFlowAdapter
from model_checks import assert_same_frames_for_the_same_seed

MODEL = catalog.get("a3c")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")
HP = MODEL.hp("smoke")


def adapter(precision="fp32"):
    return TensorFlowAdapter(WORKLOAD, HP, device="cpu", precision=precision, seed=0)


def test_network_is_the_papers():
    model = WORKLOAD.PolicyValue(MODEL.hp("paper"))
    assert sum(int(np.prod(w.shape)) for w in model.trainable_weights) == 677_943  # as tests/pytorch
    logits, values = model(tf.zeros((3, 4, 84, 84), tf.uint8))
    assert logits.shape == (3, 6) and values.shape == (3,) and logits.dtype == tf.float32


def test_n_step_returns():
    rewards, dones = tf.constant([[0.0], [1.0], [0.0]]), tf.constant([[False], [True], [False]])
    returns = WORKLOAD.n_step_returns(rewards, dones, tf.constant([10.0]), 0.5)
    assert returns.numpy().flatten().tolist() == [0.5, 1.0, 5.0]      # the episode end cuts the bootstrap


def test_optimizer_comes_from_the_hyperparameters():
    opt = adapter().training.optimizer
    assert (float(opt.learning_rate), opt.rho, opt.epsilon, opt.global_clipnorm) == pytest.approx(
        (HP["learning_rate"], HP["rmsprop_alpha"], HP["rmsprop_epsilon"], HP["max_grad_norm"]))


@pytest.fixture(scope="module")
def batch():
    b = next(DATA.batches("synthetic", HP, 2, seed=0))
    yield b
    b.actors.close()


def test_rollout_and_update_reduce_the_loss_on_a_fixed_rollout(batch):
    a = adapter()
    rollout = WORKLOAD.play(a.training, batch.actors, HP["t_max"], a.tf_device)
    assert rollout.observations.shape == (5, 2, 4, 84, 84) and rollout.actions.shape == (5, 2)
    rewards = rollout.rewards.numpy()
    rewards[-1] = [1.0, -1.0]                               # a point won and a point lost on the last step
    rollout.rewards = tf.constant(rewards)
    losses = [float(WORKLOAD.update(a.training, rollout)) for _ in range(8)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0] * 0.9, losses


def test_train_step_through_the_adapter_and_amp(batch):
    for mode in ("fp32", "amp"):
        a = adapter(mode)
        loss = a.loss_value(a.step(a.prepare(batch)))
        assert math.isfinite(loss)
    assert a.training.model.fc.compute_dtype == "bfloat16"
    Precision("fp32", on_gpu=False)


def test_same_seed_same_frames(pong_frames):
    """The environment runs in this stack and is the same for the same seed and actions."""
    assert_same_frames_for_the_same_seed(lambda: pong_frames(DATA, HP))
