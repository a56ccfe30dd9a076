"""EfficientDet-D0 on PyTorch: effdet's network and training bench, SGD, one training step.

Every size and rate comes from the hyperparameters handed in (workload.toml); nothing here
times, logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from effdet import DetBenchTrain, EfficientDet, get_efficientdet_config
from torch import nn

from _shared import torch_amp as amp


def network(hp: dict[str, Any]) -> EfficientDet:
    """effdet's EfficientDet for hp["config"] at hp["image_size"], random weights (nothing downloaded)."""
    config = get_efficientdet_config(hp["config"])
    config.num_classes = hp["num_classes"]
    config.image_size = (hp["image_size"], hp["image_size"])
    return EfficientDet(config, pretrained_backbone=False)


@dataclass
class Training:
    model: nn.Module  # the bench: network, anchors, anchor labeller and loss
    optimizer: torch.optim.Optimizer
    image_size: int
    mean: torch.Tensor
    std: torch.Tensor


def build(hp: dict[str, Any], device: torch.device) -> Training:
    bench = DetBenchTrain(network(hp)).to(device).train()
    optimizer = torch.optim.SGD(
        bench.parameters(), lr=hp["learning_rate"], momentum=hp["momentum"], weight_decay=hp["weight_decay"]
    )
    mean = torch.tensor(hp["pixel_mean"], device=device).view(3, 1, 1)
    std = torch.tensor(hp["pixel_std"], device=device).view(3, 1, 1)
    return Training(bench, optimizer, hp["image_size"], mean, std)


def to_device(batch: Any, device: torch.device) -> dict[str, Any]:
    """The images and targets on the device, each image still at its own size."""
    non_blocking = device.type == "cuda"

    def move(array: Any) -> torch.Tensor:
        return torch.from_numpy(array).to(device, non_blocking=non_blocking)

    return {"images": [move(image) for image in batch.images],
            "targets": [{key: move(value) for key, value in target.items()} for target in batch.targets]}


def resize_pad(training: Training, images: list[torch.Tensor], targets: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """effdet's input: each image scaled so its long side fits the square input, padded at the
    bottom and right and normalized; boxes scaled to match, as (y1, x1, y2, x2), padded with -1."""
    size = training.image_size
    batch = torch.zeros(len(images), 3, size, size, device=images[0].device)
    most = max(len(t["labels"]) for t in targets)
    boxes = torch.full((len(images), most, 4), -1.0, device=images[0].device)
    classes = torch.full((len(images), most), -1.0, device=images[0].device)
    for i, (image, target) in enumerate(zip(images, targets)):
        h, w = image.shape[1:]
        scale = size / max(h, w)
        nh, nw = min(size, round(h * scale)), min(size, round(w * scale))
        resized = F.interpolate(image[None], size=(nh, nw), mode="bilinear", align_corners=False)[0]
        batch[i, :, :nh, :nw] = (resized - training.mean) / training.std
        k = len(target["labels"])
        boxes[i, :k] = target["boxes"][:, [1, 0, 3, 2]] * scale
        classes[i, :k] = target["labels"].float()
    return batch, {"bbox": boxes, "cls": classes}


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, Any]:
    """The network alone in inference mode: class logits and box outputs, all levels, as
    (N, anchors, classes) and (N, anchors, 4) NumPy, anchors ordered level, location, anchor."""
    images, _ = resize_pad(training, inputs["images"], inputs["targets"])
    network = training.model.model
    was_training = network.training
    network.eval()
    try:
        with torch.no_grad():
            class_out, box_out = network(images)
    finally:
        network.train(was_training)
    n, classes = images.shape[0], network.config.num_classes

    def flat(outputs: list[torch.Tensor], width: int) -> Any:
        return torch.cat([o.permute(0, 2, 3, 1).reshape(n, -1, width) for o in outputs], dim=1).cpu().numpy()
    return {"class_logits": flat(class_out, classes), "box_outputs": flat(box_out, 4)}


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> torch.Tensor:
    """One SGD step on effdet's focal classification loss plus its weighted box loss."""
    images, target = resize_pad(training, inputs["images"], inputs["targets"])
    training.optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        loss = training.model(images, target)["loss"].float()
    amp.scaled_update(loss, training.optimizer, precision)
    return loss.detach()
