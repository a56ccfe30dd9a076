"""Inception-v3 reads ImageNet-1k exactly as ResNet-50 does, with its own crop size (hp["image_size"]).

This module re-exports the ResNet-50 workload's ImageNet pipeline (synthetic crops and the
class-folder reader) so that both models read the same data the same way.
"""

import importlib.util
import sys
from pathlib import Path


def _imagenet_pipeline():
    name = "tbdkit_workloads.resnet50.data"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "resnet50" / "data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_pipeline = _imagenet_pipeline()
SYNTHETIC = _pipeline.SYNTHETIC
DataError = _pipeline.DataError
Batch = _pipeline.Batch
batches = _pipeline.batches
synthetic_batches = _pipeline.synthetic_batches
reference_batch = _pipeline.reference_batch
check_source = _pipeline.check_source
scan_folder = _pipeline.scan_folder
