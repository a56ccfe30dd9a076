"""`tbdkit check-workload DIR|MODEL`, host side: the contract's data part here, then every other check in each
framework's stack (a process of its Python, as the agent runs: tbdkit.agent.workload_checks), and, for a model with
several frameworks, their networks against each other (describe's parameters, layers and FLOPs)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

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


def network_parity(model: catalog.Model) -> Outcome:
    """The same network on every framework: describe's parameter count, canonical layers and forward FLOPs (1%)."""
    from tbdkit.describe import in_stack as describe

    if catalog.models().get(model.name, None) is None or catalog.get(model.name).folder != model.folder:
        return {"check": "same network", "framework": "all", "status": "skipped",
                "detail": "describe compares the frameworks of the kit's own models"}  # fmt: skip
    try:
        described = {f: describe(model.name, f, "smoke") for f in model.frameworks}
    except UserError as exc:  # a stack not installed here, or a describe that failed: said in one sentence
        return {"check": "same network", "framework": "all", "status": "failed", "detail": str(exc)}
    first, *others = model.frameworks
    gaps = []
    for other in others:
        a, b = described[first], described[other]
        if a["parameters"] != b["parameters"]:
            gaps.append(f"{other} has {b['parameters']:,} parameters, {first} {a['parameters']:,}")
        layers = [[(x["name"], x["params"]) for x in d["layers"]] for d in (a, b)]
        if layers[0] != layers[1]:
            gaps.append(f"{other}'s canonical layers differ from {first}'s")
        fa, fb = a["flops_per_sample"]["forward"], b["flops_per_sample"]["forward"]
        if abs(fa - fb) > 0.01 * max(fa, fb):
            gaps.append(f"{other}'s forward FLOPs {fb:,} against {first}'s {fa:,} (over 1%)")
    detail = "; ".join(gaps) or f"{', '.join(model.frameworks)}: the same parameters, layers and FLOPs"
    return {"check": "same network", "framework": "all", "status": "failed" if gaps else "passed", "detail": detail}


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
        outcomes.append(network_parity(model))
    return outcomes


def failed(outcomes: list[Outcome]) -> bool:
    return any(o["status"] == "failed" for o in outcomes)
