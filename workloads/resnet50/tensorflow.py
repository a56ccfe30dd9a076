"""ResNet-50 v1.5 on TensorFlow 2 / Keras 3: the network, SGD with momentum and one training step.

The same network as pytorch.py (torchvision's resnet50): the stride of a downsampling bottleneck
sits on its 3x3 convolution (v1.5; keras.applications.ResNet50 is v1, with the stride on the first
1x1), and each block runs its residual path before its projection shortcut, as torchvision does.
Images run channels-last (TensorFlow's CPU kernels need NHWC); strided convolutions and the stem's
max pool pad symmetrically, as PyTorch does, not with Keras' asymmetric "same". Every size and rate
comes from the hyperparameters handed in (workload.toml); nothing here times, logs or profiles.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from _shared import keras_classifier as classifier
from _shared.keras_resnet import run, stages, stem

# the loss, the step and the batch layout are the shared classifier's (workloads/_shared)
to_device, forward, train_step, l2_penalty = (classifier.to_device, classifier.forward, classifier.train_step,
                                             classifier.l2_penalty)

class ResNet50(keras.Model):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="resnet50")
        self.stem = stem()
        self.blocks = [block for stage in stages("resnet50") for block in stage]
        self.pool = keras.layers.GlobalAveragePooling2D()
        self.fc = keras.layers.Dense(hp["num_classes"], name="fc")
        self(tf.zeros((1, hp["image_size"], hp["image_size"], 3)))  # creates the weights

    def call(self, images: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = run(self.stem, images, training)
        for block in self.blocks:
            x = block(x, training=training)
        return self.fc(self.pool(x))


def build(hp: dict[str, Any], precision: Any) -> classifier.Training:
    """`precision` sets the Keras dtype policy before the layers exist and may wrap the optimizer."""
    optimizer = precision.wrap_optimizer(
        keras.optimizers.SGD(learning_rate=hp["learning_rate"], momentum=hp["momentum"]))
    return classifier.training(ResNet50(hp), optimizer, hp)
