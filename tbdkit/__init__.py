"""tbdkit: a containerized reproducibility kit for TBD, the Training Benchmark for DNNs.

The code lives in packages of a rank (docs/architecture.md): core, env, spec, results, analysis, adapters,
agent, describe, launch, calibrate, bench, report, artifact, cli. Scripts written against the earlier flat
layout (`from tbdkit import stacks`) still find the modules that moved, by their old names, through
`__getattr__` below; it imports nothing until such a name is asked for.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__version__ = "0.1.0"

# The flat layout's module names and where each module lives now (tbdkit.spec and tbdkit.artifact are
# packages now: their modules are tbdkit.spec.run_spec and tbdkit.artifact.bundle).
MOVED = {
    "errors": "tbdkit.core.errors",
    "paths": "tbdkit.core.paths",
    "metric": "tbdkit.core.metric",
    "events": "tbdkit.core.events",
    "cpus": "tbdkit.env.cpus",
    "nsight": "tbdkit.env.nsight",
    "locks": "tbdkit.env.locks",
    "installer": "tbdkit.env.installer",
    "stacks": "tbdkit.env.stacks",
    "lockgen": "tbdkit.env.lockgen",
    "images": "tbdkit.env.images",
    "oci": "tbdkit.env.oci",
    "doctor": "tbdkit.env.doctor",
    "catalog": "tbdkit.spec.catalog",
    "sweep_spec": "tbdkit.spec.sweep_spec",
    "store": "tbdkit.results.index",
    "mllog": "tbdkit.results.mllog",
    "compare": "tbdkit.analysis.compare",
    "scaling": "tbdkit.analysis.scaling",
    "cost": "tbdkit.analysis.cost",
    "render": "tbdkit.launch.render",
    "choice": "tbdkit.bench.plan",
    "run_list": "tbdkit.bench.run_list",
    "sweep": "tbdkit.bench.sweep",
    "reference": "tbdkit.bench.reference",
    "artifact_doc": "tbdkit.artifact.doc",
    "console": "tbdkit.cli.console",
}


def __getattr__(name: str) -> ModuleType:
    if name in MOVED:
        return importlib.import_module(MOVED[name])
    raise AttributeError(f"module 'tbdkit' has no attribute {name!r}")
