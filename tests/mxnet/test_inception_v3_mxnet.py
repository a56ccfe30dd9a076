"""Inception-v3 on MXNet: torchvision's network with its auxiliary head (while training), RMSProp
from workload.toml, a smoke step that learns. Runs in the MXNet stack; parity with the other
frameworks is tests/test_vision_frameworks.py."""

import mxnet as mx
from mxnet import autograd

from tbdkit.spec import catalog
from model_checks import adapter

MODEL = catalog.get("inception_v3")
DATA = catalog.load_module(MODEL, "data")


def test_parameter_counts_are_torchvisions():
    paper = adapter("inception_v3", "mxnet", MODEL.hp("paper"))
    assert paper.model_info()["parameters"] == 27_161_264
    images = mx.nd.zeros((2, 3, 299, 299))
    with autograd.record():
        logits, aux = paper.training.model(images)
    assert logits.shape == aux.shape == (2, 1000)
    assert paper.training.model(images).shape == (2, 1000)  # inference: no auxiliary head


def test_rmsprop_and_the_auxiliary_weight_come_from_the_hyperparameters():
    hp = MODEL.hp("paper")
    training = adapter("inception_v3", "mxnet", hp).training
    opt = training.trainer._optimizer
    assert (opt.learning_rate, opt.gamma1, opt.epsilon, opt.wd) == (
        hp["learning_rate"], hp["rmsprop_decay"], hp["rmsprop_epsilon"], hp["weight_decay"])
    assert (training.aux_weight, training.smoothing) == (hp["aux_loss_weight"], hp["label_smoothing"])
