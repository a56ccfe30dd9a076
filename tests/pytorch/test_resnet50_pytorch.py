"""ResNet-50 on PyTorch: the published size, a smoke step that learns, every math mode."""

import math

import pytest
import torch

from workload_checks import (assert_learns, assert_workload_file_is_clean, losses_on_a_fixed_batch, modules,
                             parameters, step_in_each_math_mode)

MODEL, WORKLOAD, DATA = modules("resnet50")


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_parameter_count_is_the_published_one(preset):
    # He et al. 2016 / torchvision: 25.56 M parameters, whatever the crop size.
    net = WORKLOAD.network(MODEL.hp(preset))
    assert parameters(net) == 25_557_032
    assert round(parameters(net) / 1e6, 2) == MODEL.info["params_millions"] == 25.56


def test_v1_5_strides_in_the_3x3_convolution():
    net = WORKLOAD.network(MODEL.hp("paper"))
    first = net.layer2[0]
    assert first.conv1.stride == (1, 1) and first.conv2.stride == (2, 2)


def test_logits_shape():
    hp = MODEL.hp("smoke")
    inputs = WORKLOAD.to_device(next(DATA.batches("synthetic", hp, 2, seed=0)), torch.device("cpu"))
    with torch.no_grad():
        logits = WORKLOAD.network(hp).eval()(inputs["images"])
    assert logits.shape == (2, 1000) and inputs["labels"].dtype == torch.int64


def test_smoke_training_reduces_the_loss():
    assert_learns(losses_on_a_fixed_batch("resnet50", batch_size=4, steps=5), factor=0.8)


def test_every_math_mode_steps():
    losses = step_in_each_math_mode("resnet50", batch_size=2)
    assert set(losses) == {"fp32", "tf32", "amp"} and all(math.isfinite(x) for x in losses.values())


def test_workload_file_is_clean():
    assert_workload_file_is_clean("resnet50")
