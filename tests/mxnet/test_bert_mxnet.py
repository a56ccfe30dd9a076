"""BERT on MXNet (by hand, transformers' layout): sizes, the SQuAD head, the schedule, decoupled
weight decay off for LayerNorm and biases, training on synthetic pre-training and SQuAD batches
(the loss falls). Runs in the MXNet stack (`make test-mxnet`)."""

import numpy as np
import pytest

from tbdkit.spec import catalog
from tbdkit.adapters.mxnet import MXNetAdapter
from model_checks import learned

MODEL = catalog.get("bert")
WORKLOAD = catalog.load_module(MODEL, "mxnet")
DATA = catalog.load_module(MODEL, "data")


def adapter(hp):
    return MXNetAdapter(WORKLOAD, hp, device="cpu", precision="fp32", seed=0)


@pytest.mark.parametrize("variant, expected", [(None, 242_898), ("squad", 232_450)])  # as tests/pytorch's formula
def test_parameter_count(variant, expected):
    training = adapter(MODEL.hp("smoke", variant)).training
    params = training.model.collect_params().values()
    assert sum(int(np.prod(p.shape)) for p in params if p.grad_req != "null") == expected
    if variant is None:  # the decoder's weight is the word-embedding table itself
        assert training.model.decoder.weight is training.model.word.weight


def test_schedule_warms_up_then_decays_linearly():
    hp = {"learning_rate": 1.0, "warmup_steps": 10_000, "num_train_steps": 1_000_000}
    got = [WORKLOAD.learning_rate(hp, s) for s in (0, 4_999, 9_999, 499_999, 2_000_000)]
    assert got == pytest.approx([1e-4, 0.5, 0.99, 0.5, 0.0])


def test_weight_decay_skips_layernorm_and_biases():
    training = adapter(MODEL.hp("smoke")).training
    names = {p.name for p in training.decay}
    assert names and all(n.endswith("_weight") for n in names)
    assert not any("norm" in n or n.endswith(("bias", "gamma", "beta")) for n in names)
    assert training.trainer._optimizer.wd == 0.0  # decoupled: applied by train_step, not Adam's L2


@pytest.mark.parametrize("variant", [None, "squad"])
def test_smoke_training_counts_its_steps(variant):
    """The learning check's runs (6 steps, the loss falls: tests/mxnet/test_every_model_mxnet.py) counted each step."""
    assert learned("bert", "mxnet", variant).trained.training.steps == 6
