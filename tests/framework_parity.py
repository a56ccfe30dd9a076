"""Helpers of the host-side tests of a model's frameworks (tests/test_*_frameworks.py): a script in a framework's own
stack venv, and a model's listed framework differences. tbdkit/bench/cross_framework.py compares the frameworks."""

from __future__ import annotations

import subprocess
import tomllib
from typing import Any

from tbdkit.env import stacks
from tbdkit.spec import catalog


def run_in_stack(framework: str, *args: str) -> str:
    """`python ARGS` in the framework's own stack venv (its agent environment); it must succeed.
    Returns its standard output."""
    proc = subprocess.run([str(stacks.python_of(framework)), *args], capture_output=True, text=True,
                          env=stacks.agent_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def framework_differences(model: str) -> list[dict[str, Any]]:
    """The `[[framework_difference]]` entries of the model's workload.toml (an empty list where it has none)."""
    return tomllib.loads((catalog.get(model).folder / "workload.toml").read_text()).get("framework_difference", [])
