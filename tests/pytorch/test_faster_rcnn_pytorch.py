"""Faster R-CNN on PyTorch: the ResNet C4 design's size, shapes and losses, a smoke step that
learns, every math mode."""


import pytest
import torch
import torchvision

from model_checks import modules, parameters

MODEL, WORKLOAD, DATA = modules("faster_rcnn")


def expected_parameters(hp):
    """The trunk and conv5 (the ResNet without its classifier), the RPN head and the predictor."""
    resnet = getattr(torchvision.models, hp["backbone"])(weights=None)
    trunk_and_head = parameters(resnet) - parameters(resnet.fc)
    c4 = resnet.layer3[-1].conv2.out_channels * (4 if hp["backbone"] in ("resnet50", "resnet101") else 1)
    c5 = 2 * c4
    a = len(hp["anchor_sizes"]) * len(hp["anchor_ratios"])
    rpn = 9 * c4 * c4 + c4 + (c4 * a + a) + (c4 * 4 * a + 4 * a)
    k = hp["num_classes"]
    return trunk_and_head + rpn + (c5 * k + k) + (c5 * 4 * k + 4 * k)


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_parameter_count_matches_the_design(preset):
    assert parameters(WORKLOAD.network(MODEL.hp(preset))) == expected_parameters(MODEL.hp(preset))


def test_paper_network_is_resnet101_c4():
    net = WORKLOAD.network(MODEL.hp("paper"))
    assert parameters(net) == 52_199_638
    assert net.backbone.out_channels == 1024                        # conv4 feeds the RPN and RoI pooling
    assert len(net.backbone[-1]) == 23 and len(net.roi_heads.box_head[0]) == 3  # ResNet-101: conv4 x23, conv5 x3
    assert net.rpn.anchor_generator.num_anchors_per_location() == [9]
    assert net.transform.min_size == (600,) and net.transform.max_size == 1000
    assert net.roi_heads.box_roi_pool.output_size == (14, 14)


def test_training_returns_the_four_losses():
    hp = MODEL.hp("smoke")
    model = WORKLOAD.network(hp).train()
    inputs = WORKLOAD.to_device(next(DATA.batches("synthetic", hp, 1, seed=0)), torch.device("cpu"))
    losses = model(inputs["images"], inputs["targets"])
    assert set(losses) == {"loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"}
    assert all(torch.isfinite(v) for v in losses.values())
