"""Llama on TensorFlow 2 / Keras 3 with keras-hub: LlamaCausalLM over a LlamaBackbone built from the
hyperparameters handed in (workload.toml), random weights (never a preset); AdamW with the linear warm-up
and cosine decay of pytorch.py, gradients clipped at a global norm.

The same network as pytorch.py (transformers' LlamaForCausalLM): RMSNorm before attention and the SwiGLU
MLP, grouped-query attention, RoPE with Llama 3.1's frequency scaling (keras-hub's frequency adjustment,
low and high frequency factors and pre-training length are transformers' factor, low_freq_factor,
high_freq_factor and original_max_position_embeddings), the output projection tied to the token
embedding where tie_word_embeddings says so. Every weight matrix is drawn again, each on its own, at
initializer_range (transformers' init): keras-hub draws the token embedding at 0.01, and its attention's four
projections from one initializer, which gives them one draw. Nothing here times, logs or profiles, and nothing
is downloaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import keras
import keras_hub
import numpy as np
import tensorflow as tf

from _shared.tf_amp import built, scaled_update


def rope(hp: dict[str, Any]) -> dict[str, Any]:
    """keras-hub's RoPE arguments for the hyperparameters' rope_type ("llama3": Llama 3.1's scaling)."""
    args: dict[str, Any] = {"rope_max_wavelength": float(hp["rope_theta"])}
    if hp["rope_type"] == "llama3":
        args |= {"rope_frequency_adjustment_factor": float(hp["rope_factor"]),
                 "rope_low_freq_factor": float(hp["rope_low_freq_factor"]),
                 "rope_high_freq_factor": float(hp["rope_high_freq_factor"]),
                 "rope_pretraining_sequence_length": int(hp["rope_original_max_position_embeddings"])}
    elif hp["rope_type"] != "default":
        raise ValueError(f"rope_type {hp['rope_type']!r}: keras-hub's Llama has plain RoPE and Llama 3.1's scaling")
    return args


def network(hp: dict[str, Any]) -> keras.Model:
    if hp["seq_len"] > hp["max_position_embeddings"]:
        raise ValueError(f"seq_len {hp['seq_len']} exceeds max_position_embeddings {hp['max_position_embeddings']}")
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=hp["vocab_size"], num_layers=hp["num_hidden_layers"],
        num_query_heads=hp["num_attention_heads"], num_key_value_heads=hp["num_key_value_heads"],
        hidden_dim=hp["hidden_size"], intermediate_dim=hp["intermediate_size"], layer_norm_epsilon=hp["rms_norm_eps"],
        tie_word_embeddings=hp["tie_word_embeddings"], **rope(hp))
    for weight in backbone.trainable_weights:  # every matrix its own draw at transformers' initializer_range
        if len(weight.shape) >= 2:
            weight.assign(keras.random.normal(tuple(weight.shape), stddev=hp["initializer_range"], dtype=weight.dtype))
    return keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)


class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """pytorch.py's schedule as its LambdaLR steps it: lr x (step+1)/warmup during warm-up, then a cosine from lr
    down to floor x lr at `total` steps; `step` is the number of updates already taken."""

    def __init__(self, lr: float, warmup: int, total: int, floor: float) -> None:
        self.lr, self.warmup, self.total, self.floor = lr, warmup, total, floor

    def __call__(self, step: Any) -> tf.Tensor:
        s = tf.cast(step, tf.float32) + 1.0
        progress = tf.minimum(1.0, (s - self.warmup) / max(1, self.total - self.warmup))
        cosine = self.floor + (1.0 - self.floor) * 0.5 * (1.0 + tf.cos(math.pi * progress))
        return self.lr * tf.where(s < self.warmup, s / self.warmup, cosine)

    def get_config(self) -> dict[str, Any]:
        return {"lr": self.lr, "warmup": self.warmup, "total": self.total, "floor": self.floor}


def next_token_loss(logits: tf.Tensor, input_ids: tf.Tensor) -> tf.Tensor:
    """transformers' causal-LM loss: the mean cross-entropy of each position's logits against the next token."""
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(input_ids[:, 1:], tf.cast(logits[:, :-1], tf.float32))
    return tf.reduce_mean(ce)


@dataclass
class Training:
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    step: Any  # the compiled training step


def build(hp: dict[str, Any], precision: Any) -> Training:
    """`precision` sets the Keras dtype policy before the layers exist and may wrap the optimizer."""
    model = network(hp)
    optimizer = keras.optimizers.AdamW(
        learning_rate=WarmupCosine(hp["learning_rate"], hp["warmup_steps"], hp["num_train_steps"], hp["min_lr_ratio"]),
        beta_1=hp["adam_beta1"], beta_2=hp["adam_beta2"], epsilon=hp["adam_epsilon"],
        weight_decay=hp["weight_decay"], global_clipnorm=hp["max_grad_norm"])  # every weight decays, as in pytorch.py
    optimizer = built(precision.wrap_optimizer(optimizer), model.trainable_variables)

    @tf.function(input_signature=[tf.TensorSpec((None, hp["seq_len"]), tf.int64)])
    def step(input_ids: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model({"token_ids": input_ids, "padding_mask": tf.ones_like(input_ids)}, training=True)
            loss = next_token_loss(logits, input_ids)
        scaled_update(tape, loss, optimizer, model.trainable_variables)
        return loss

    return Training(model, optimizer, step)


def to_device(batch: Any, device: str) -> dict[str, tf.Tensor]:
    with tf.device(device):
        return {"input_ids": tf.constant(batch.input_ids)}


def forward(training: Training, inputs: dict[str, tf.Tensor]) -> dict[str, np.ndarray]:
    """The network alone in inference mode, run eagerly (no loss, no update): its logits, as NumPy."""
    ids = inputs["input_ids"]
    logits = training.model({"token_ids": ids, "padding_mask": tf.ones_like(ids)}, training=False)
    return {"logits": tf.cast(logits, tf.float32).numpy()}


def train_step(training: Training, inputs: dict[str, tf.Tensor], precision: Any) -> tf.Tensor:
    """One AdamW step on the next-token cross-entropy; the math mode is set by the adapter."""
    return training.step(inputs["input_ids"])
