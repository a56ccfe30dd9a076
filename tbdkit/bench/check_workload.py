"""`tbdkit check-workload DIR|MODEL`, host side: the contract's data part here, then every other check in each
framework's stack (a process of its Python, as the agent runs: tbdkit.agent.workload_checks), and, for a model with
several frameworks, their networks and outputs against each other (tbdkit.bench.cross_framework)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tbdkit.bench import cross_framework
from tbdkit.core.errors import UserError
from tbdkit.env import stacks
from tbdkit.spec import catalog, contract

Outcome = dict[str, str]  # check, framework, status (passed | failed | skipped), detail


def folder_of(target: str) -> Path:
    """A model folder (a path holding workload.toml) or a model the catalog knows, as its folder."""
    path = Path(target)
    if path.is_dir():
        return path
    if "/" in target or target.startswith("."):
        raise UserError(f"{target} is not a folder: name a model folder (holding workload.toml) or a model.")
    return catalog.get(target).folder


def in_stack(folder: Path, framework: str, graph: str) -> list[Outcome]:
    """The stack-side checks of one framework file, as outcomes (one failed outcome where the process failed)."""
    python = stacks.require(framework)
    argv = [str(python), "-m", "tbdkit.agent.workload_checks", "--folder", str(folder.resolve())]
    proc = subprocess.run([*argv, "--framework", framework, "--graph", graph], capture_output=True, text=True,
                          env=stacks.agent_env())  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return [{"check": "checks", "framework": framework, "status": "failed",
                 "detail": f"the {framework} stack's checks stopped (exit {proc.returncode}: {last})"}]  # fmt: skip
    return list(json.loads(lines[-1]))


def across_frameworks(model: catalog.Model) -> list[Outcome]:
    """The checks across the model's frameworks (tbdkit.bench.cross_framework): the same network, FLOPs, state and
    the same outputs for the same weights."""
    if catalog.models().get(model.name, None) is None or catalog.get(model.name).folder != model.folder:
        return [{"check": "same network", "framework": "all", "status": "skipped",
                 "detail": "describe compares the frameworks of the kit's own models"}]  # fmt: skip
    return cross_framework.check(model)


def check(target: str, framework: str | None = None, graph: str = "standard") -> list[Outcome]:
    """Every check of a model folder (or a model), on `framework` or on each framework it has."""
    folder = folder_of(target)
    gaps = contract.folder_gaps(folder)
    if gaps:
        return [{"check": "contract", "framework": "-", "status": "failed", "detail": gap} for gap in gaps]
    model = catalog.model_in(folder)
    if framework is not None:
        catalog.check_framework(model, framework)
    frameworks = [framework] if framework else list(model.frameworks)
    outcomes = [o for f in frameworks for o in in_stack(folder, f, graph)]
    if framework is None and len(model.frameworks) > 1:
        outcomes += across_frameworks(model)
    return outcomes


def failed(outcomes: list[Outcome]) -> bool:
    return any(o["status"] == "failed" for o in outcomes)
