"""Inception-v3 on TensorFlow: torchvision's network with its auxiliary head, RMSProp and label
smoothing from workload.toml, a smoke step that learns. Runs in the TensorFlow stack; parity with
the other frameworks is tests/test_vision_frameworks.py."""

import numpy as np
import pytest
import tensorflow as tf

from tbdkit.spec import catalog
from model_checks import kept_learning_run

MODEL = catalog.get("inception_v3")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")
# the learning check's network (smoke preset; its steps on a fixed batch), built and traced once for the unit
run = kept_learning_run("inception_v3", "tensorflow")


def test_parameter_counts_are_torchvisions():
    """The paper preset's network alone (no optimizer: its state is not what is counted), as the adapter counts."""
    paper = WORKLOAD.InceptionV3(MODEL.hp("paper"))
    assert sum(int(w.numpy().size) for w in paper.trainable_weights) == 27_161_264
    images = tf.zeros((2, 299, 299, 3))
    logits, aux = paper(images, training=True)
    assert logits.shape == aux.shape == (2, 1000)
    assert paper(images, training=False).shape == (2, 1000)  # inference: no auxiliary head


def test_label_smoothed_cross_entropy_is_pytorchs():
    logits = np.array([[2.0, 0.5, -1.0], [0.0, 1.0, 3.0]], np.float32)
    labels = np.array([0, 1])
    log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    target = np.full((2, 3), 0.1 / 3) + 0.9 * np.eye(3)[labels]
    want = -(target * log_p).sum(1).mean()
    got = WORKLOAD.classifier.cross_entropy(tf.constant(logits), tf.constant(labels, tf.int64), 0.1)
    assert float(got) == pytest.approx(want, rel=1e-5)


def test_rmsprop_comes_from_the_hyperparameters(run):
    hp, opt = MODEL.hp("smoke"), run.trained.training.optimizer
    assert float(opt.learning_rate) == pytest.approx(hp["learning_rate"], rel=1e-6)
    assert (opt.rho, opt.epsilon) == (hp["rmsprop_decay"], hp["rmsprop_epsilon"])
