"""Inception-v3 reads ImageNet-1k exactly as ResNet-50 does, with its own crop size (hp["image_size"]).

This module re-exports the ResNet-50 workload's ImageNet pipeline (synthetic crops and the
class-folder reader) so that both models read the same data the same way.
"""


from _shared.sibling import load

_pipeline = load("resnet50", "data")
SYNTHETIC = _pipeline.SYNTHETIC
DataError = _pipeline.DataError
Batch = _pipeline.Batch
batches = _pipeline.batches
synthetic_batches = _pipeline.synthetic_batches
reference_batch = _pipeline.reference_batch
check_source = _pipeline.check_source
scan_folder = _pipeline.scan_folder
