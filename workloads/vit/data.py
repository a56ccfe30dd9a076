"""ViT-B/16's input pipeline: ResNet-50's ImageNet reader (workloads/resnet50/data.py), the same folder
layout, synthetic batches, random resized crops and checks, at the sizes ViT's hyperparameters give."""

from __future__ import annotations

from _shared import sibling
from _shared.errors import DataError

__all__ = ["Batch", "DataError", "batches", "check_source", "reference_batch", "synthetic_batches"]

_imagenet = sibling.load("resnet50", "data")

Batch = _imagenet.Batch
batches = _imagenet.batches
synthetic_batches = _imagenet.synthetic_batches
reference_batch = _imagenet.reference_batch
check_source = _imagenet.check_source
