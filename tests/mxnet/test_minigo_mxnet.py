"""MiniGo on MXNet: dual_net's residual tower at both sizes, its heads (batch norm without scale or
offset), the schedule, L2, training on self-play positions (the loss falls). Runs in the MXNet stack."""

import mxnet as mx
import numpy as np
import pytest

from tbdkit.spec import catalog
from tbdkit.adapters.mxnet import MXNetAdapter
from model_checks import learned

MODEL = catalog.get("minigo")
WORKLOAD = catalog.load_module(MODEL, "mxnet")
DATA = catalog.load_module(MODEL, "data")


def adapter():
    return MXNetAdapter(WORKLOAD, MODEL.hp("smoke"), device="cpu", precision="fp32", seed=0)


@pytest.mark.parametrize("preset, expected", [("smoke", 190_775), ("paper", 22_827_871)])  # as tests/pytorch
def test_parameter_count(preset, expected):
    hp = MODEL.hp(preset)
    training = WORKLOAD.build(hp, mx.cpu())
    params = training.model.collect_params().values()
    assert sum(int(np.prod(p.shape)) for p in params if p.grad_req != "null") == expected
    n = hp["board_size"]
    if preset == "smoke":
        logits, value = training.model(mx.nd.zeros((2, 17, n, n)))
        assert logits.shape == (2, n * n + 1) and value.shape == (2,) and float(value.abs().max().asscalar()) <= 1


def test_learning_rate_steps_down_at_the_same_steps_as_pytorch():
    hp = MODEL.hp("paper")
    assert [WORKLOAD.learning_rate(hp, s) for s in (0, 399_999, 400_000, 600_000)] == [0.01, 0.01, 0.001, 0.0001]


def test_sgd_and_l2_come_from_the_hyperparameters():
    hp, training = MODEL.hp("smoke"), adapter().training
    opt = training.trainer._optimizer
    assert (opt.learning_rate, opt.momentum, opt.wd) == (hp["lr_rates"][0], hp["sgd_momentum"], 0.0)
    kinds = {type(p).__name__ for p in training.kernels}
    assert len(training.kernels) == 2 * hp["trunk_layers"] + 1 + 2 + 3 and kinds == {"Parameter"}
    assert all(not p.name.endswith("bias") for p in training.kernels)


def test_smoke_training_counts_its_steps():
    """The learning check's run (6 steps, the loss falls: tests/mxnet/test_every_model_mxnet.py) counted each step."""
    assert learned("minigo", "mxnet").trained.training.steps == 6
