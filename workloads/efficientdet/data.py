"""EfficientDet reads COCO as Mask R-CNN does, boxes only (hp["instance_masks"] is false).

This module re-exports the Mask R-CNN workload's pipeline (synthetic COCO-sized images with
boxes, and the COCO-format JSON reader); the network's fixed square input is made in pytorch.py.
"""

import importlib.util
import sys
from pathlib import Path


def _coco_pipeline():
    name = "tbdkit_workloads.mask_rcnn.data"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "mask_rcnn" / "data.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


_pipeline = _coco_pipeline()
SYNTHETIC = _pipeline.SYNTHETIC
DataError = _pipeline.DataError
Batch = _pipeline.Batch
batches = _pipeline.batches
check_source = _pipeline.check_source
scan_coco = _pipeline.scan_coco
synthetic_batches = _pipeline.synthetic_batches


def reference_batch(hp: dict) -> Batch:
    """The one sample FLOPs per sample are quoted for: a single synthetic image (seed 0), which every
    framework scales and pads to the network's square input (hp["image_size"])."""
    return next(synthetic_batches(hp, 1, seed=0))
