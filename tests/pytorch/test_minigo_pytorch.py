"""MiniGo on PyTorch: dual_net's residual tower at both sizes, its heads, schedule, training, AMP."""


import pytest
import torch

from tbdkit.spec import catalog

MODEL = catalog.get("minigo")
WORKLOAD = catalog.load_module(MODEL, "pytorch")


def expected_parameters(hp):
    """Input conv + BN, 2 x (3x3 conv + BN) per block, then the heads (their BN has no scale/offset)."""
    n, w, planes = hp["board_size"], hp["conv_width"], 2 * hp["history"] + 1
    trunk = planes * w * 9 + 2 * w + hp["trunk_layers"] * 2 * (w * w * 9 + 2 * w)
    pw, vw, fc = hp["policy_conv_width"], hp["value_conv_width"], hp["fc_width"]
    policy = w * pw + pw * n * n * (n * n + 1) + n * n + 1
    value = w * vw + vw * n * n * fc + fc + fc + 1
    return trunk + policy + value


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_parameter_count_matches_the_hyperparameters(preset):
    hp = MODEL.hp(preset)
    model = WORKLOAD.DualNet(hp)
    assert sum(p.numel() for p in model.parameters()) == expected_parameters(hp)
    n = hp["board_size"]
    logits, value = model.eval()(torch.zeros(2, 17, n, n))
    assert logits.shape == (2, n * n + 1) and value.shape == (2,) and value.abs().max() <= 1


def test_paper_size():
    # 19x19, 256 filters, 19 residual blocks, agz features: 22.83 M
    assert expected_parameters(MODEL.hp("paper")) == 22_827_871


def test_learning_rate_steps_down():
    hp = MODEL.hp("paper")
    f = WORKLOAD.piecewise(hp["lr_boundaries"], hp["lr_rates"])
    assert [f(s) for s in (0, 399_999, 400_000, 600_000)] == pytest.approx([1.0, 1.0, 0.1, 0.01])
