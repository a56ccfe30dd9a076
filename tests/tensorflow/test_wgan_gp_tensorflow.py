"""WGAN-GP on TensorFlow: gan_64x64.py's ResNet pair as pytorch.py builds it, the gradient penalty,
the critic schedule, a smoke iteration whose critic learns. Runs in the TensorFlow stack; parity
with PyTorch is tests/test_vision_frameworks.py."""

import numpy as np
import pytest
import tensorflow as tf

from tbdkit.spec import catalog
from model_checks import kept_learning_run

MODEL = catalog.get("wgan_gp")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")
# the learning check's pair (smoke preset, two critic steps per iteration; its iterations on a fixed batch)
run = kept_learning_run("wgan_gp", "tensorflow")


def parameters(layer):
    return sum(int(np.prod(w.shape)) for w in layer.trainable_weights)


def test_paper_network_size_is_pytorchs():
    pair = WORKLOAD.Pair(MODEL.hp("paper"))
    assert (parameters(pair.generator), parameters(pair.critic)) == (8_540_483, 7_491_841)


def test_shapes(run):
    hp = MODEL.hp("smoke")
    pair = run.trained.training.model
    images = pair.generator(tf.random.normal((3, hp["noise_dim"])))
    assert images.shape == (3, 64, 64, 3) and float(tf.reduce_max(tf.abs(images))) <= 1
    assert pair.critic(images).shape == (3,)


def test_gradient_penalty_of_a_linear_critic():
    # D(x) = <w, x> has gradient w everywhere: the penalty is (||w|| - 1)^2.
    w = tf.fill((8, 8, 3), 0.1)
    critic = lambda x, training: tf.reduce_sum(tf.reshape(x * w, (tf.shape(x)[0], -1)), axis=1)  # noqa: E731
    gp = WORKLOAD.gradient_penalty(critic, tf.random.normal((4, 8, 8, 3)), tf.random.normal((4, 8, 8, 3)))
    assert float(gp) == pytest.approx((float(tf.norm(w)) - 1) ** 2, rel=1e-5)


def test_smoke_iterations_train_the_critic_per_slice_and_the_generator_once(run):
    # the learning check's run: 2 steps of a batch of 2, the loss falls
    hp, t = run.hp, run.trained.training
    assert hp["critic_iters"] > 1  # a critic step per slice, told from one per iteration
    assert (int(t.c_optimizer.iterations), int(t.g_optimizer.iterations)) == (2 * hp["critic_iters"], 2)
    assert (t.c_optimizer.beta_1, t.c_optimizer.beta_2, t.c_optimizer.epsilon) == (*hp["adam_betas"], hp["adam_epsilon"])
