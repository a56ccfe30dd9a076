"""Faster R-CNN on PyTorch: torchvision's FasterRCNN on a ResNet C4 trunk, SGD, one training step.

Every size and rate comes from the hyperparameters handed in (workload.toml); nothing here
times, logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torchvision
from torch import nn
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor
from torchvision.models.detection.rpn import AnchorGenerator
from torchvision.ops import MultiScaleRoIAlign

from _shared import torch_amp as amp


def c4_parts(hp: dict[str, Any]) -> tuple[nn.Sequential, nn.Sequential, int]:
    """Split a torchvision ResNet: conv1-conv4 (stride 16, shared by the RPN and the detector)
    and conv5 + global average pooling (the per-RoI head); returns both and conv5's width."""
    resnet = getattr(torchvision.models, hp["backbone"])(weights=None)
    trunk = nn.Sequential(resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool,
                          resnet.layer1, resnet.layer2, resnet.layer3)
    trunk.out_channels = _width(resnet.layer3)  # the attribute FasterRCNN reads
    head = nn.Sequential(resnet.layer4, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return trunk, head, _width(resnet.layer4)


def _width(layer: nn.Sequential) -> int:
    """Output channels of a ResNet stage (its last block's last convolution)."""
    convs = [m for m in layer[-1].modules() if isinstance(m, nn.Conv2d)]
    return convs[-1].out_channels


def network(hp: dict[str, Any]) -> FasterRCNN:
    trunk, head, head_width = c4_parts(hp)
    anchors = AnchorGenerator(sizes=(tuple(hp["anchor_sizes"]),), aspect_ratios=(tuple(hp["anchor_ratios"]),))
    n = hp["rpn_pre_nms_top_n"], hp["rpn_post_nms_top_n"]
    return FasterRCNN(
        trunk, num_classes=None, min_size=hp["min_size"], max_size=hp["max_size"],
        image_mean=hp["pixel_mean"], image_std=hp["pixel_std"],
        rpn_anchor_generator=anchors, rpn_pre_nms_top_n_train=n[0], rpn_post_nms_top_n_train=n[1],
        rpn_nms_thresh=hp["rpn_nms_threshold"], rpn_fg_iou_thresh=hp["rpn_fg_iou"],
        rpn_bg_iou_thresh=hp["rpn_bg_iou"], rpn_batch_size_per_image=hp["rpn_batch_size"],
        rpn_positive_fraction=hp["rpn_positive_fraction"],
        box_roi_pool=MultiScaleRoIAlign(["0"], output_size=hp["roi_output_size"], sampling_ratio=2),
        box_head=head, box_predictor=FastRCNNPredictor(head_width, hp["num_classes"]),
        box_fg_iou_thresh=hp["roi_fg_iou"], box_bg_iou_thresh=hp["roi_bg_iou"],
        box_batch_size_per_image=hp["roi_batch_size"], box_positive_fraction=hp["roi_positive_fraction"],
    )


@dataclass
class Training:
    model: nn.Module
    optimizer: torch.optim.Optimizer


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = network(hp).to(device).train()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=hp["learning_rate"], momentum=hp["momentum"], weight_decay=hp["weight_decay"]
    )
    return Training(model, optimizer)


def to_device(batch: Any, device: torch.device) -> dict[str, Any]:
    """Images as a list of (3, H, W) tensors and targets as a list of dicts of tensors."""
    non_blocking = device.type == "cuda"

    def move(array: Any) -> torch.Tensor:
        return torch.from_numpy(array).to(device, non_blocking=non_blocking)

    return {"images": [move(image) for image in batch.images],
            "targets": [{key: move(value) for key, value in target.items()} for target in batch.targets]}


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, Any]:
    """The training-mode forward pass without a step (its losses, as NumPy): the detector head runs on
    exactly roi_batch_size RoIs per image, as in training, where inference would run it on however many
    proposals survive NMS; so FLOPs and layer positions are the training step's on every framework.
    The RPN head's outputs (objectness logits and deltas, both (N, C, H, W)) come along: they do not
    depend on the samplers' draws, so the same weights give the same values on every framework."""
    rpn: dict[str, torch.Tensor] = {}  # the RPN head's raw outputs, which do not depend on sampling
    handle = training.model.rpn.head.register_forward_hook(
        lambda module, args, out: rpn.update(rpn_objectness=out[0][0], rpn_deltas=out[1][0]))  # the one level
    try:
        losses = training.model(inputs["images"], inputs["targets"])
    finally:
        handle.remove()
    return {key: value.detach().cpu().numpy() for key, value in (losses | rpn).items()}


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> torch.Tensor:
    """One SGD step on the sum of the RPN and detector losses (and the mask loss, for Mask R-CNN)."""
    training.optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        losses = training.model(inputs["images"], inputs["targets"])
    loss = sum(value.float() for value in losses.values())
    amp.scaled_update(loss, training.optimizer, precision)
    return loss.detach()
