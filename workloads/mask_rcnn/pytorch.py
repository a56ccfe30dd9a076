"""Mask R-CNN on PyTorch: torchvision's maskrcnn_resnet50_fpn, SGD and one training step.

The inputs and the training step (the sum of torchvision's detection losses, here with the mask
loss) are Faster R-CNN's, loaded from that workload. Every size and rate comes from the
hyperparameters handed in (workload.toml); nothing here times, logs or profiles.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torchvision.models.detection import maskrcnn_resnet50_fpn
from torchvision.models.detection.rpn import AnchorGenerator

from _shared.sibling import load

_steps = load("faster_rcnn", "pytorch")
Training = _steps.Training
to_device = _steps.to_device
train_step = _steps.train_step
forward = _steps.forward  # the training-mode losses, and the RPN head's outputs on the first FPN level (P2)


def network(hp: dict[str, Any]) -> nn.Module:
    """torchvision's Mask R-CNN, ResNet-50 FPN, random weights everywhere (nothing downloaded); the
    values workload.toml lists are torchvision's defaults, handed in so that a preset changes them here
    as in tensorflow.py."""
    anchors = AnchorGenerator(sizes=tuple((s,) for s in hp["anchor_sizes"]),
                              aspect_ratios=(tuple(hp["anchor_ratios"]),) * len(hp["anchor_sizes"]))
    return maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=hp["num_classes"],
        min_size=hp["min_size"], max_size=hp["max_size"], image_mean=hp["pixel_mean"], image_std=hp["pixel_std"],
        rpn_anchor_generator=anchors,
        rpn_pre_nms_top_n_train=hp["rpn_pre_nms_top_n"], rpn_post_nms_top_n_train=hp["rpn_post_nms_top_n"],
        rpn_nms_thresh=hp["rpn_nms_threshold"], rpn_fg_iou_thresh=hp["rpn_fg_iou"], rpn_bg_iou_thresh=hp["rpn_bg_iou"],
        rpn_batch_size_per_image=hp["rpn_batch_size"], rpn_positive_fraction=hp["rpn_positive_fraction"],
        box_fg_iou_thresh=hp["roi_fg_iou"], box_bg_iou_thresh=hp["roi_bg_iou"],
        box_batch_size_per_image=hp["roi_batch_size"], box_positive_fraction=hp["roi_positive_fraction"],
    )


def build(hp: dict[str, Any], device: torch.device) -> Any:
    model = network(hp).to(device).train()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=hp["learning_rate"], momentum=hp["momentum"], weight_decay=hp["weight_decay"]
    )
    return Training(model, optimizer)
