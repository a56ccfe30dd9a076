"""BERT on TensorFlow (by hand, transformers' layout): BERT-large's size, the SQuAD head, the
schedule, weight decay off for LayerNorm and biases, training on synthetic pre-training and SQuAD
batches (the loss falls), AMP. Runs in the TensorFlow stack (`make test-tensorflow`)."""


import numpy as np
import pytest

from tbdkit.spec import catalog
from tbdkit.adapters.tensorflow import TensorFlowAdapter
from model_checks import amp_step

MODEL = catalog.get("bert")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")


def count(model):
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)


@pytest.mark.parametrize("preset, variant, expected", [("smoke", None, 242_898), ("smoke", "squad", 232_450)])
# as tests/pytorch's formula (BERT-large itself, 336.2 M, is built and counted there: too slow to build twice more)
def test_parameter_count(preset, variant, expected):
    assert count(WORKLOAD.Bert(MODEL.hp(preset, variant))) == expected


def test_sequence_longer_than_the_positions_is_refused():
    with pytest.raises(ValueError, match="seq_len 512 exceeds max_position_embeddings 64"):
        WORKLOAD.Bert({**MODEL.hp("smoke"), "seq_len": 512})


def test_schedule_warms_up_then_decays_linearly():
    f = WORKLOAD.WarmupLinearDecay(1.0, 10_000, 1_000_000)
    assert [float(f(s)) for s in (0, 4_999, 9_999, 499_999, 2_000_000)] == pytest.approx([1e-4, 0.5, 0.99, 0.5, 0.0])


def adapter(hp, precision="fp32"):
    return TensorFlowAdapter(WORKLOAD, hp, device="cpu", precision=precision, seed=0)


def test_weight_decay_skips_layernorm_and_biases():
    opt = adapter(MODEL.hp("smoke")).training.optimizer
    decayed = {v.path for v in adapter(MODEL.hp("smoke")).training.model.trainable_variables
               if not opt._use_weight_decay(v)}
    assert decayed and all(p.endswith(("bias", "gamma", "beta")) for p in decayed)
    assert (opt.weight_decay, opt.global_clipnorm) == (MODEL.hp("smoke")["weight_decay"], 1.0)


def test_amp_computes_in_bfloat16_on_cpu():
    """The amp step of check-workload's math-mode check (its batch; the loss finite) ran in bfloat16."""
    a, _ = amp_step("bert")
    assert a.training.model.pooler.compute_dtype == "bfloat16"
