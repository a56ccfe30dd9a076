"""ResNet-50 on MXNet: torchvision's v1.5 network (not Gluon's model zoo v1), hyperparameters from
workload.toml, a smoke step that learns. Runs in the MXNet stack (`make test-mxnet`); parity with
the other frameworks is tests/test_vision_frameworks.py."""

import mxnet as mx
import numpy as np
from mxnet import gluon

from tbdkit.spec import catalog
from model_checks import adapter

MODEL = catalog.get("resnet50")
WORKLOAD = catalog.load_module(MODEL, "mxnet")
DATA = catalog.load_module(MODEL, "data")


def test_batch_norm_state_is_torchvisions():
    info = adapter("resnet50", "mxnet").model_info()
    assert info["non_trainable_state"] == 53_120  # running mean and variance of 53 batch-norm layers


def test_v1_5_strides_in_the_3x3_convolution():
    # conv, bn, relu, pool, stage 1 (3 blocks), then stage 2
    block = adapter("resnet50", "mxnet").training.model.features[7]
    convs = [b for b in block.residual if isinstance(b, gluon.nn.Conv2D)]
    assert [c._kwargs["kernel"] for c in convs] == [(1, 1), (3, 3), (1, 1)]
    assert [c._kwargs["stride"] for c in convs] == [(1, 1), (2, 2), (1, 1)]


def test_sgd_settings_come_from_the_hyperparameters():
    hp, opt = MODEL.hp("smoke"), adapter("resnet50", "mxnet").training.trainer._optimizer
    assert (opt.learning_rate, opt.momentum, opt.wd) == (hp["learning_rate"], hp["momentum"], hp["weight_decay"])


def test_label_smoothing_targets_are_pytorchs():
    t = WORKLOAD.targets(mx.nd.array([2, 0]), 4, 0.1).asnumpy()
    np.testing.assert_allclose(t, [[0.025, 0.025, 0.925, 0.025], [0.925, 0.025, 0.025, 0.025]], rtol=1e-6)
    assert WORKLOAD.targets(mx.nd.array([2, 0]), 4, 0.0).asnumpy().tolist() == [2, 0]


def test_optimizer_state_is_one_momentum_buffer_per_weight():
    """memory.json's `dynamic` on MXNet: SGD with momentum keeps a buffer the size of each trainable parameter."""
    a = adapter("resnet50", "mxnet")
    a.step(a.prepare(next(DATA.synthetic_batches(MODEL.hp("smoke"), 2, seed=0))))
    assert a.optimizer_state_bytes() == a.model_info()["parameter_bytes"]
