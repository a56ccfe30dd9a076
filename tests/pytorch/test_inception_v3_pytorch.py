"""Inception-v3 on PyTorch: the published size, the auxiliary loss, a smoke step that learns, every math mode."""

import math

import pytest
import torch

from workload_checks import (assert_learns, assert_workload_file_is_clean, losses_on_a_fixed_batch, modules,
                             parameters, step_in_each_math_mode)

MODEL, WORKLOAD, DATA = modules("inception_v3")


def test_parameter_count_is_the_published_one():
    # Szegedy et al. 2016 / the TBD paper: 23.8 M without the auxiliary classifier; torchvision's
    # network with it has 27.16 M.
    paper = WORKLOAD.network(MODEL.hp("paper"))
    assert parameters(paper) == 27_161_264
    assert parameters(paper, skip_prefix="AuxLogits.") == 23_834_568
    assert round(parameters(paper, skip_prefix="AuxLogits.") / 1e6, 1) == MODEL.info["params_millions"] == 23.8
    smoke = WORKLOAD.network(MODEL.hp("smoke"))
    assert smoke.AuxLogits is None and parameters(smoke) == 23_834_568


def test_paper_objective_adds_the_weighted_auxiliary_loss():
    hp = MODEL.hp("paper")
    torch.manual_seed(0)
    training = WORKLOAD.build(hp, torch.device("cpu"))
    inputs = WORKLOAD.to_device(next(DATA.batches("synthetic", hp, 2, seed=0)), torch.device("cpu"))
    assert inputs["images"].shape == (2, 3, 299, 299)
    with torch.no_grad():
        torch.manual_seed(1)
        total = WORKLOAD.objective(training, inputs["images"], inputs["labels"])
        torch.manual_seed(1)
        out = training.model(inputs["images"])
    smooth = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    want = smooth(out.logits, inputs["labels"]) + 0.4 * smooth(out.aux_logits, inputs["labels"])
    assert out.aux_logits.shape == (2, 1000) and float(total) == pytest.approx(float(want), rel=1e-4)


def test_smoke_training_reduces_the_loss():
    assert_learns(losses_on_a_fixed_batch("inception_v3", batch_size=2, steps=4), factor=0.8)


def test_every_math_mode_steps():
    losses = step_in_each_math_mode("inception_v3", batch_size=2)
    assert set(losses) == {"fp32", "tf32", "amp"} and all(math.isfinite(x) for x in losses.values())


def test_workload_file_is_clean():
    assert_workload_file_is_clean("inception_v3")
