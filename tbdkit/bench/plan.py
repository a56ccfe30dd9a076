"""What the commands share, below the command line: splitting comma lists, parsing batch lists, counting
GPUs, asking each framework whether it sees one, the auto preset, and choosing (and setting up) the
frameworks of a run. No command is defined here; the commands of `tbdkit.cli` import it."""

from __future__ import annotations

import json

from tbdkit.cli.console import console, err_console
from tbdkit.core.errors import UserError
from tbdkit.env import stacks
from tbdkit.env.machine import gpu_count
from tbdkit.spec import catalog


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


def framework_gpus(fw: str) -> tuple[int | None, str | None]:
    """(GPUs the framework sees, why none), asked of the stack's own interpreter (tbdkit.adapters.probe);
    None when its stack is not installed here (nothing to ask)."""
    import subprocess

    if fw not in stacks.STACKS or not stacks.is_installed(fw):
        return None, None
    try:
        proc = subprocess.run(
            [str(stacks.python_of(fw)), "-m", "tbdkit.adapters.probe", fw],
            capture_output=True,
            text=True,
            timeout=600,
            env=stacks.agent_env(),
        )
    except subprocess.TimeoutExpired:
        return 0, f"the {fw} stack did not answer within 600 s whether it sees a GPU"
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        return int(answer["gpus"]), answer.get("reason")
    except (IndexError, KeyError, ValueError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return 0, f"asking the {fw} stack for its GPUs failed ({tail})"


def require_framework_gpus(device: str, answers: dict[str, tuple[int | None, str | None]]) -> dict[str, str | None]:
    """The frameworks that see no GPU, and why; with --device cuda[:N] the first of them stops the command."""
    blind = {fw: why for fw, (n, why) in answers.items() if n == 0}
    if blind and device.startswith("cuda"):
        fw, why = next(iter(blind.items()))
        raise UserError(f"--device {device}: {fw} sees no GPU: {why}.")
    return blind


def resolve_auto_preset(device: str, frameworks: list[str], launcher: str) -> str:
    """`--preset auto`: paper where every framework to run sees a GPU itself, else smoke (a CPU-only
    build, a driver too old for the build, a container without the GPU: said, never silently paper-sized
    on the CPU). `--device cuda` with a framework that sees no GPU fails here, naming the cause."""
    if device == "cpu":
        return "smoke"
    if launcher == "docker":  # the image's framework is asked by the container preflight; the host's GPUs here
        return "paper" if gpu_count() > 0 else "smoke"
    answers = {fw: framework_gpus(fw) for fw in frameworks}
    blind = require_framework_gpus(device, answers)
    if blind:
        for fw, why in blind.items():
            err_console.print(
                f"{fw} sees no GPU ({why}): --preset auto runs the smoke preset", style="yellow", highlight=False
            )
        return "smoke"
    if any(n is None for n, _ in answers.values()):  # a stack not installed yet: the host's GPUs decide
        return "paper" if gpu_count() > 0 else "smoke"
    return "paper" if answers else "smoke"


def choose_frameworks(model: catalog.Model, requested: list[str], setup: bool) -> list[str]:
    if requested == ["all"]:
        requested = list(model.frameworks)
    for fw in requested:
        catalog.check_framework(model, fw)
    if requested:
        chosen = requested
    else:
        chosen = [fw for fw in model.frameworks if fw in stacks.STACKS and stacks.is_installed(fw)]
        if not chosen:
            first = next((fw for fw in model.frameworks if fw in stacks.STACKS), None)
            if first is None or not setup:
                raise UserError(
                    f"No framework stack for {model.name} is installed: run `tbdkit setup "
                    f"{first or 'pytorch'}` or pass --setup."
                )
            chosen = [first]
    for fw in chosen:
        stacks.get(fw)
        if setup and not stacks.is_current(fw):
            with console.status(f"setting up the {stacks.STACKS[fw].title} stack in {stacks.venv_path(fw)} ..."):
                stacks.setup(fw)
        stacks.require(fw)
    return chosen
