"""ViT-B/16 on TensorFlow 2 / Keras 3 with keras-hub: ViTImageClassifier over a ViTBackbone built from the
hyperparameters handed in (workload.toml), random weights (never a preset); AdamW with DeiT's rate, decay and
label smoothing, a linear warm-up and cosine schedule, one training step.

The same network as pytorch.py (torchvision's VisionTransformer): a patch convolution, a class token and
learned positions, pre-norm encoder blocks (LayerNorm eps 1e-6, multi-head attention with biases, an exact
GELU MLP), a final LayerNorm and a linear head on the class token (pooling "token", no pre-logits layer).
Images run channels-last. Nothing here times, logs or profiles, and nothing is downloaded.
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub
import tensorflow as tf

from _shared import keras_classifier as classifier
from _shared.tf_amp import built, scaled_update

# the batch layout and the inference pass are the shared classifier's (workloads/_shared)
to_device, forward, train_step, Training = (classifier.to_device, classifier.forward, classifier.train_step,
                                           classifier.Training)


def no_decay(model: keras.Model) -> list[keras.Variable]:
    """DeiT's (timm's optimizer factory) weights without decay: biases (attention's are (heads, head) here), norms,
    the class token and the positions, as pytorch.py's groups."""
    return [v for v in model.trainable_variables
            if len(v.shape) <= 1 or v.name in ("bias", "class_token") or "position_embedding" in v.path]


def network(hp: dict[str, Any]) -> keras.Model:
    size = hp["image_size"]
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(size, size, 3), patch_size=hp["patch_size"], num_layers=hp["num_layers"],
        num_heads=hp["num_heads"], hidden_dim=hp["hidden_dim"], mlp_dim=hp["mlp_dim"], dropout_rate=hp["dropout"],
        attention_dropout=hp["attention_dropout"], layer_norm_epsilon=1e-6)  # torchvision's LayerNorm eps
    model = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=hp["num_classes"], preprocessor=None)
    for weight in model.output_dense.weights:  # torchvision's head starts at zero (VisionTransformer.__init__)
        weight.assign(keras.ops.zeros(weight.shape, weight.dtype))
    return model


class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """pytorch.py's schedule as its LambdaLR steps it: lr x (step+1)/warmup, then a cosine to 0 at `total` steps."""

    def __init__(self, lr: float, warmup: int, total: int) -> None:
        self.lr, self.warmup, self.total = lr, warmup, total

    def __call__(self, step: Any) -> tf.Tensor:
        s = tf.cast(step, tf.float32) + 1.0
        progress = tf.minimum(1.0, (s - self.warmup) / max(1, self.total - self.warmup))
        return self.lr * tf.where(s < self.warmup, s / self.warmup, 0.5 * (1.0 + tf.cos(3.141592653589793 * progress)))

    def get_config(self) -> dict[str, Any]:
        return {"lr": self.lr, "warmup": self.warmup, "total": self.total}


def build(hp: dict[str, Any], precision: Any) -> classifier.Training:
    """`precision` sets the Keras dtype policy before the layers exist and may wrap the optimizer."""
    model, size = network(hp), hp["image_size"]
    optimizer = keras.optimizers.AdamW(
        learning_rate=WarmupCosine(hp["learning_rate"], hp["warmup_steps"], hp["num_train_steps"]),
        weight_decay=hp["weight_decay"], epsilon=hp["adam_epsilon"])
    optimizer.exclude_from_weight_decay(var_list=no_decay(model))
    optimizer = built(precision.wrap_optimizer(optimizer), model.trainable_variables)

    @tf.function(input_signature=[tf.TensorSpec((None, size, size, 3), tf.float32), tf.TensorSpec((None,), tf.int64)])
    def step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = classifier.cross_entropy(model(images, training=True), labels, hp["label_smoothing"])
        scaled_update(tape, loss, optimizer, model.trainable_variables)
        return loss

    return classifier.Training(model, optimizer, step)
