"""Host-side tests load a workload's data.py and workload.toml by path (workloads are files, and
the kit's venv has no framework): one helper for every model's data tests."""

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

from tbdkit import catalog

WORKLOADS = Path(__file__).parents[1] / "workloads"


def load_data(model: str) -> ModuleType:
    catalog.workloads_on_path()  # the workloads' shared package, as the catalog's loader has it
    spec = importlib.util.spec_from_file_location(f"{model}_data_under_test", WORKLOADS / model / "data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def workload_toml(model: str) -> dict[str, Any]:
    return tomllib.loads((WORKLOADS / model / "workload.toml").read_text())


def hparams(model: str, preset: str) -> dict[str, Any]:
    """[hparams] overridden by [preset.<preset>], as the catalog merges them."""
    toml = workload_toml(model)
    return {**toml["hparams"], **toml["preset"][preset]}
