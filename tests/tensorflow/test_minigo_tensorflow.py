"""MiniGo on TensorFlow: dual_net's residual tower at both sizes, its heads, the schedule, L2,
training on self-play positions (the loss falls), AMP. Runs in the TensorFlow stack."""


import numpy as np
import pytest
import tensorflow as tf

from tbdkit.spec import catalog
from tbdkit.adapters.tensorflow import TensorFlowAdapter
from model_checks import stepped

MODEL = catalog.get("minigo")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")


def adapter(precision="fp32"):
    return TensorFlowAdapter(WORKLOAD, MODEL.hp("smoke"), device="cpu", precision=precision, seed=0)


@pytest.mark.parametrize("preset, expected", [("smoke", 190_775), ("paper", 22_827_871)])  # as tests/pytorch
def test_parameter_count(preset, expected):
    hp = MODEL.hp(preset)
    model = WORKLOAD.DualNet(hp)
    assert sum(int(np.prod(w.shape)) for w in model.trainable_weights) == expected
    n = hp["board_size"]
    if preset == "smoke":
        logits, value = model(tf.zeros((2, 17, n, n)))
        assert logits.shape == (2, n * n + 1) and value.shape == (2,) and float(tf.reduce_max(tf.abs(value))) <= 1


def test_learning_rate_steps_down_at_the_same_steps_as_pytorch():
    hp = MODEL.hp("paper")
    f = WORKLOAD.schedule(hp["lr_boundaries"], hp["lr_rates"])
    assert [float(f(s)) for s in (0, 399_999, 400_000, 600_000)] == pytest.approx([0.01, 0.01, 0.001, 0.0001])


def test_l2_covers_every_kernel_and_no_bias():
    model = WORKLOAD.DualNet(MODEL.hp("smoke"))
    for w in model.weights:
        w.assign(tf.ones_like(w))
    kernels = sum(int(np.prod(w.shape)) for w in model.trainable_weights if "kernel" in w.path)
    assert float(WORKLOAD.l2_penalty(model)) == kernels and kernels < sum(
        int(np.prod(w.shape)) for w in model.trainable_weights)


def test_amp_computes_in_bfloat16_on_cpu():
    """The amp step of the math-mode check (finite: tests/tensorflow/test_every_model_tensorflow.py) ran in bfloat16."""
    a, _ = stepped("minigo", "tensorflow")["amp"]
    assert a.training.model.policy_fc.compute_dtype == "bfloat16"
