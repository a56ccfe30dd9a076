"""Load a workload's data.py by path and its preset hyperparameters, as the data tests need them."""

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType

WORKLOADS = Path(__file__).parents[1] / "workloads"


def load_data(model: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{model}_data_under_test", WORKLOADS / model / "data.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def hparams(model: str, preset: str) -> dict:
    toml = tomllib.loads((WORKLOADS / model / "workload.toml").read_text())
    return {**toml["hparams"], **toml["preset"][preset]}
