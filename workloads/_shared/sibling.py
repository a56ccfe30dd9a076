"""Another workload's file, for a workload built on it (Mask R-CNN on Faster R-CNN's training step,
EfficientDet on Mask R-CNN's COCO reader, ...). Workloads are files, not a package, and never import
the kit, so this loads by path as tbdkit/spec/catalog.py does, under the same module name
(tbdkit_workloads.<workload>.<part>): one file is one module however it is reached."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

WORKLOADS = Path(__file__).resolve().parents[1]


def load(workload: str, part: str) -> ModuleType:
    """workloads/<workload>/<part>.py, imported once."""
    name = f"tbdkit_workloads.{workload}.{part}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, WORKLOADS / workload / f"{part}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]  # a failed import must not leave a half-made module behind
            raise
    return sys.modules[name]
