"""What to run: the model catalog, RunSpec, SweepSpec, the launchers a spec may name.

In the flat layout `tbdkit.spec` was RunSpec's module (now tbdkit.spec.run_spec): a script written
against it (`from tbdkit import spec as specs; specs.load(path)`) still finds that module's names here,
through `__getattr__`, which imports nothing until such a name is asked for."""

from __future__ import annotations

import importlib
from typing import Any

_SUBMODULES = {"catalog", "launchers", "run_spec", "sweep_spec"}


def __getattr__(name: str) -> Any:
    if name not in _SUBMODULES and not name.startswith("__"):
        run_spec = importlib.import_module("tbdkit.spec.run_spec")
        if hasattr(run_spec, name):
            return getattr(run_spec, name)
    raise AttributeError(f"module 'tbdkit.spec' has no attribute {name!r}")
