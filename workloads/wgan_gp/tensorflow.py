"""WGAN-GP on TensorFlow 2 / Keras 3: gan_64x64.py's 64x64 ResNet generator and critic, Adam, and
one training iteration (critic_iters critic updates with the gradient penalty, then one generator
update).

The same networks as pytorch.py, channels-last (TensorFlow's CPU kernels need NHWC). The
generator's first dense output is read as (8 DIM, 4, 4) and the critic's last feature map is
flattened in (C, H, W) order, as PyTorch does, so the dense layers mean the same weights. The
critic's layer norm is GroupNormalization with one group (per-channel scale and offset). Every
size and rate comes from the hyperparameters handed in (workload.toml); nothing here times, logs
or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from _shared.tf_amp import built, scaled_update


def norm(kind: str) -> keras.layers.Layer:
    """PyTorch's defaults: BatchNorm2d (eps 1e-5, momentum 0.1 = 0.9 in Keras' terms) in the generator,
    GroupNorm(1, C) (eps 1e-5) in the critic."""
    if kind == "batch":
        return keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5)
    return keras.layers.GroupNormalization(groups=1, epsilon=1e-5)


def conv(filters: int, kernel: int, bias: bool = True) -> keras.layers.Conv2D:
    return keras.layers.Conv2D(filters, kernel, padding="same", use_bias=bias)


def chain(layers: list[keras.layers.Layer], x: tf.Tensor, training: bool) -> tf.Tensor:
    for layer in layers:
        x = layer(x, training=training)
    return x


class ResidualBlock(keras.layers.Layer):
    """gan_64x64.py's ResidualBlock: the 1x1 shortcut (run first, as PyTorch's forward does), then
    norm, ReLU, conv, norm, ReLU, conv; 'up' upsamples (nearest) before the first conv, 'down'
    mean-pools after the second."""

    def __init__(self, cin: int, cout: int, resample: str, norm_kind: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        relu = keras.layers.ReLU
        if resample == "up":
            up = keras.layers.UpSampling2D
            self.shortcut = [up(2), conv(cout, 1)]
            self.residual = [norm(norm_kind), relu(), up(2), conv(cout, 3, bias=False),
                             norm(norm_kind), relu(), conv(cout, 3)]
        elif resample == "down":
            pool = keras.layers.AveragePooling2D
            self.shortcut = [pool(2), conv(cout, 1)]
            self.residual = [norm(norm_kind), relu(), conv(cin, 3, bias=False),
                             norm(norm_kind), relu(), conv(cout, 3), pool(2)]
        else:
            raise ValueError(f"resample must be 'up' or 'down', got {resample!r}")

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        shortcut = chain(self.shortcut, x, training)
        return shortcut + chain(self.residual, x, training)


class Generator(keras.layers.Layer):
    """Noise -> 4x4x(8 DIM) -> four upsampling blocks -> BN, ReLU, 3x3 conv -> tanh (64x64x3)."""

    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        d = hp["dim"]
        self.top = 8 * d
        self.input_layer = keras.layers.Dense(4 * 4 * 8 * d)
        widths = [8 * d, 8 * d, 4 * d, 2 * d, d]
        self.blocks = [ResidualBlock(a, b, "up", "batch") for a, b in zip(widths, widths[1:])]
        self.output_layers = [norm("batch"), keras.layers.ReLU(), conv(3, 3)]

    def call(self, noise: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = tf.reshape(self.input_layer(noise), (-1, self.top, 4, 4))
        x = chain(self.blocks, tf.transpose(x, (0, 2, 3, 1)), training)  # PyTorch's (C, 4, 4), channels last
        return tf.tanh(chain(self.output_layers, x, training))


class Critic(keras.layers.Layer):
    """64x64x3 -> 3x3 conv -> four downsampling blocks (layer norm) -> dense -> one score."""

    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        d = hp["dim"]
        widths = [d, 2 * d, 4 * d, 8 * d, 8 * d]
        self.input_layer = conv(d, 3)
        self.blocks = [ResidualBlock(a, b, "down", "layer") for a, b in zip(widths, widths[1:])]
        self.output_layer = keras.layers.Dense(1)

    def call(self, images: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = chain(self.blocks, self.input_layer(images), training)
        x = tf.reshape(tf.transpose(x, (0, 3, 1, 2)), (tf.shape(x)[0], -1))  # flattened as PyTorch's (C, H, W)
        return tf.reshape(self.output_layer(x), (-1,))


class Pair(keras.Model):
    """Both networks, so that the kit counts every trained parameter."""

    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="wgan_gp")
        self.generator, self.critic = Generator(hp), Critic(hp)
        self.critic(self.generator(tf.zeros((1, hp["noise_dim"]))))  # creates the weights (inference mode)


@dataclass
class Training:
    model: Pair
    g_optimizer: keras.optimizers.Optimizer
    c_optimizer: keras.optimizers.Optimizer
    noise_dim: int
    step: Any  # the compiled training iteration


def gradient_penalty(critic: Any, real: tf.Tensor, fake: tf.Tensor) -> tf.Tensor:
    """E[(||grad D(x_hat)||_2 - 1)^2] at random interpolates of real and fake images."""
    alpha = tf.random.uniform((tf.shape(real)[0], 1, 1, 1))
    mixed = alpha * real + (1.0 - alpha) * fake
    with tf.GradientTape() as tape:
        tape.watch(mixed)
        score = tf.reduce_sum(tf.cast(critic(mixed, training=True), tf.float32))
    grad = tf.reshape(tape.gradient(score, mixed), (tf.shape(real)[0], -1))
    return tf.reduce_mean(tf.square(tf.norm(grad, axis=1) - 1.0))


def build(hp: dict[str, Any], precision: Any) -> Training:
    """`precision` sets the Keras dtype policy before the layers exist and may wrap the optimizers."""
    model = Pair(hp)
    generator, critic = model.generator, model.critic
    beta1, beta2 = hp["adam_betas"]

    def adam(network: keras.Model) -> keras.optimizers.Optimizer:
        return built(precision.wrap_optimizer(keras.optimizers.Adam(
            learning_rate=hp["learning_rate"], beta_1=beta1, beta_2=beta2, epsilon=hp["adam_epsilon"])),
            network.trainable_variables)

    g_optimizer, c_optimizer = adam(generator), adam(critic)
    noise_dim, gp_lambda, size = hp["noise_dim"], hp["gp_lambda"], hp["image_size"]

    @tf.function(input_signature=[tf.TensorSpec((hp["critic_iters"], None, size, size, 3), tf.float32)])
    def step(real: tf.Tensor) -> tf.Tensor:
        n = tf.shape(real)[1]
        loss = tf.constant(0.0)
        for i in range(hp["critic_iters"]):  # one critic update per slice of real images
            fake = tf.stop_gradient(tf.cast(generator(tf.random.normal((n, noise_dim)), training=True), tf.float32))
            with tf.GradientTape() as tape:
                wasserstein = (tf.reduce_mean(tf.cast(critic(fake, training=True), tf.float32))
                               - tf.reduce_mean(tf.cast(critic(real[i], training=True), tf.float32)))
                loss = wasserstein + gp_lambda * gradient_penalty(critic, real[i], fake)
            scaled_update(tape, loss, c_optimizer, critic.trainable_variables)
        with tf.GradientTape() as tape:  # then one generator update
            g_loss = -tf.reduce_mean(tf.cast(critic(generator(tf.random.normal((n, noise_dim)), training=True),
                                                    training=True), tf.float32))
        scaled_update(tape, g_loss, g_optimizer, generator.trainable_variables)
        return loss  # the last critic loss, as pytorch.py

    return Training(model, g_optimizer, c_optimizer, noise_dim, step)


def to_device(batch: Any, device: str) -> dict[str, tf.Tensor]:
    """The batch's real images, (critic_iters, N, 3, S, S) -> channels last (critic_iters, N, S, S, 3)."""
    with tf.device(device):
        return {"real": tf.constant(np.ascontiguousarray(batch.images.transpose(0, 1, 3, 4, 2)))}


def forward(training: Training, inputs: dict[str, tf.Tensor]) -> np.ndarray:
    """Both networks in inference mode, run eagerly: the critic's scores (n,) of images the generator
    makes from fixed NumPy noise, one per real image of the first slice, as NumPy."""
    noise = np.random.default_rng(0).standard_normal((int(inputs["real"].shape[1]), training.noise_dim),
                                                     dtype=np.float32)
    model = training.model
    return model.critic(model.generator(tf.constant(noise), training=False), training=False).numpy()


def train_step(training: Training, inputs: dict[str, tf.Tensor], precision: Any) -> tf.Tensor:
    """One WGAN-GP iteration; the math mode is set by the adapter."""
    return training.step(inputs["real"])
