"""Load a workload's data.py by path and its preset hyperparameters, as the data tests need them."""

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType

from tbdkit import catalog

WORKLOADS = Path(__file__).parents[1] / "workloads"


def load_data(model: str) -> ModuleType:
    catalog.workloads_on_path()  # the workloads' shared package, as the catalog's loader has it
    spec = importlib.util.spec_from_file_location(f"{model}_data_under_test", WORKLOADS / model / "data.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def hparams(model: str, preset: str) -> dict:
    toml = tomllib.loads((WORKLOADS / model / "workload.toml").read_text())
    return {**toml["hparams"], **toml["preset"][preset]}


def truncated_image(path: Path, width: int, height: int, fmt: str = "JPEG") -> Path:
    """A noise image at `path` cut to half its bytes: its header is intact, so only decoding every
    pixel finds the damage (noise, so that the cut half holds pixel data, not padding)."""
    import numpy as np
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path, fmt)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path
