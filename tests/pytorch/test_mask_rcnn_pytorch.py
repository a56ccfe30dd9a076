"""Mask R-CNN on PyTorch: torchvision's published size, the five losses, a smoke step that learns,
every math mode."""


import torch
from torch import nn

from model_checks import modules, parameters

MODEL, WORKLOAD, DATA = modules("mask_rcnn")


def test_parameter_count_is_the_published_one():
    # torchvision publishes 44,401,393 with a pretrained backbone, whose batch norm is frozen (its
    # scale and offset are buffers); from scratch every batch norm trains, adding its scale and offset.
    with torch.device("meta"):  # its parameters' shapes alone (no memory, no initialization), as the paper count's
        net = WORKLOAD.network(MODEL.hp("paper"))
    norms = sum(parameters(m) for m in net.modules() if isinstance(m, nn.BatchNorm2d))
    assert parameters(net) - norms == 44_401_393
    assert round((parameters(net) - norms) / 1e6, 1) == MODEL.info["params_millions"] == 44.4
    assert net.roi_heads.box_predictor.cls_score.out_features == 91
    assert net.transform.min_size == (800,) and net.transform.max_size == 1333


def test_training_returns_the_five_losses():
    hp = MODEL.hp("smoke")
    model = WORKLOAD.network(hp).train()
    inputs = WORKLOAD.to_device(next(DATA.batches("synthetic", hp, 1, seed=0)), torch.device("cpu"))
    assert inputs["targets"][0]["masks"].dtype == torch.uint8
    losses = model(inputs["images"], inputs["targets"])
    assert set(losses) == {"loss_classifier", "loss_box_reg", "loss_mask", "loss_objectness", "loss_rpn_box_reg"}
    assert all(torch.isfinite(v) for v in losses.values())
