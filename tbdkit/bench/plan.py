"""The one planner of `tbdkit bench` and `tbdkit sweep`, below the command line: from what the user typed
to the frameworks, preset, launcher and data a grid of runs uses, each checked before anything runs.

    p = plan(model, frameworks, preset, device, launcher, nodes, data)   # launcher, auto preset, data path
    ... the command builds its grid of specs from p and validates it ...
    frameworks = prepare(p, device, setup)   # the data, then each framework's launcher preflight (and setup)

What differs between launchers (which frameworks they can run, whether a framework is asked for its GPUs,
what a preflight checks, what --setup installs) is asked of the launcher (tbdkit.launch); the `auto`
launcher rule is tbdkit.spec.launchers'. Messages go through tbdkit.bench.progress. Also here: splitting
comma lists and parsing batch lists, which every command shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tbdkit import launch
from tbdkit.bench import progress
from tbdkit.core.errors import UserError
from tbdkit.env.machine import gpu_count
from tbdkit.launch.base import Launcher
from tbdkit.spec import catalog

__all__ = [
    "Plan",
    "choose_frameworks",
    "gpu_count",
    "parse_batches",
    "plan",
    "prepare",
    "require_framework_gpus",
    "resolve_auto_preset",
    "split_list",
]


def split_list(values: list[str] | None) -> list[str]:
    return [v.strip() for raw in values or [] for v in raw.split(",") if v.strip()]


def parse_batches(values: list[str] | None) -> list[int]:
    out = []
    for v in split_list(values):
        try:
            out.append(int(v))
        except ValueError:
            raise UserError(f"Batch size '{v}' is not a whole number: pass e.g. --batch 8 or BATCH=8,16,32.") from None
    return out


def require_framework_gpus(device: str, answers: dict[str, tuple[int | None, str | None]]) -> dict[str, str | None]:
    """The frameworks that see no GPU, and why; with --device cuda[:N] the first of them stops the command."""
    blind = {fw: why for fw, (n, why) in answers.items() if n == 0}
    if blind and device.startswith("cuda"):
        fw, why = next(iter(blind.items()))
        raise UserError(f"--device {device}: {fw} sees no GPU: {why}.")
    return blind


def resolve_auto_preset(device: str, frameworks: list[str], launcher: str | Launcher) -> str:
    """`--preset auto`: paper where every framework to run sees a GPU itself, else smoke (a CPU-only
    build, a driver too old for the build, a container without the GPU: said, never silently paper-sized
    on the CPU). `--device cuda` with a framework that sees no GPU fails here, naming the cause. Where the
    launcher cannot ask a framework before the run (a stack not installed yet, an image), this host's
    GPUs decide."""
    if device == "cpu":
        return "smoke"
    chosen = launch.get(launcher) if isinstance(launcher, str) else launcher
    answers = {fw: chosen.framework_gpus(fw) for fw in frameworks}
    blind = require_framework_gpus(device, answers)
    if blind:
        with progress.live() as notify:
            for fw, why in blind.items():
                notify.say(f"{fw} sees no GPU ({why}): --preset auto runs the smoke preset", "warning")
        return "smoke"
    if any(n is None for n, _ in answers.values()):
        return "paper" if gpu_count() > 0 else "smoke"
    return "paper" if answers else "smoke"


@dataclass(frozen=True)
class Plan:
    """What a bench or a sweep runs, resolved: never `auto`, `all` or a relative data path."""

    model: catalog.Model
    launcher: str
    preset: str
    requested: list[str]  # the frameworks asked for ('all' expanded); [] for the launcher's default ones
    data: str  # 'synthetic' or the dataset's absolute path
    chosen: Launcher | None = field(default=None, compare=False, repr=False)  # `launcher`, resolved once

    @property
    def checked(self) -> list[str]:
        """The frameworks a command validates its grid's specs for before anything installs or runs."""
        return self.requested or list(self.model.frameworks[:1])

    def hp(self, variant: str | None = None) -> dict[str, Any]:
        return self.model.hp(self.preset, variant)


def plan(
    model: str,
    frameworks: list[str] | None,
    preset: str,
    device: str,
    launcher: str,
    nodes: int = 1,
    data: str = "synthetic",
) -> Plan:
    """The model, the launcher (`auto` resolved), the preset (`auto`: asked of the frameworks that would run,
    through the launcher; with --device cuda each of them must see a GPU) and the data path."""
    m = catalog.get(model)
    chosen = launch.get(launcher, nodes)
    wanted = split_list(frameworks)
    requested = list(m.frameworks) if wanted == ["all"] else wanted
    # What would run (the spec's validation judges what was asked for, after this): nothing installed yet.
    candidates = requested or chosen.frameworks(m, [], True)
    if preset == "auto":
        preset = resolve_auto_preset(device, candidates, chosen)
    elif device.startswith("cuda"):  # the framework itself says why it has no GPU
        require_framework_gpus(device, {fw: chosen.framework_gpus(fw) for fw in candidates})
    if preset == "converge" and not requested:  # the converge preset is PyTorch's
        requested = ["pytorch"]
    if data != "synthetic":
        data = str(Path(data).expanduser().resolve())
    return Plan(m, chosen.name, preset, requested, data, chosen)


def choose_frameworks(
    model: catalog.Model,
    requested: list[str],
    setup: bool,
    device: str = "auto",
    launcher: str | Launcher = "native",
) -> list[str]:
    """The frameworks of `model` to run (`requested`, 'all' expanded; else the launcher's default ones), each
    through its launcher's preflight; with `setup`, a missing stack is installed first (shown as it goes)."""
    chosen = launch.get(launcher) if isinstance(launcher, str) else launcher
    frameworks = chosen.frameworks(model, requested, setup)
    with progress.live() as notify:
        for fw in frameworks:
            chosen.preflight(fw, device, setup, notify.busy)
    return frameworks


def prepare(p: Plan, device: str, setup: bool, variant: str | None = None) -> list[str]:
    """After the command validated its grid: the real dataset checked, then the frameworks to run chosen
    by the launcher and each one's preflight (with `setup`, a missing stack is installed first)."""
    if p.data != "synthetic":
        catalog.check_source(p.model, p.data, p.hp(variant))
    return choose_frameworks(p.model, p.requested, setup, device, p.chosen or p.launcher)
