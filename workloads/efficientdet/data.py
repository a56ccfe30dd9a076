"""EfficientDet reads COCO as Mask R-CNN does, boxes only (hp["instance_masks"] is false).

This module re-exports the Mask R-CNN workload's pipeline (synthetic COCO-sized images with
boxes, and the COCO-format JSON reader); the network's fixed square input is made in pytorch.py.
"""


from _shared.sibling import load

_pipeline = load("mask_rcnn", "data")
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


def input_shape(batch: Batch, hp: dict) -> list[int]:
    """One sample's input as `tbdkit describe` reports it: the network's square input (hp["image_size"]),
    which every framework scales and pads each image to, whatever the image's own size."""
    return [3, int(hp["image_size"]), int(hp["image_size"])]
