"""`tbdkit kick-the-tires`: every instrument once inside a time budget (its logic: tbdkit.bench.kick)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from tbdkit.bench import kick
from tbdkit.bench.plan import choose_frameworks, split_list
from tbdkit.cli.console import console
from tbdkit.core.errors import UserError
from tbdkit.env import stacks
from tbdkit.spec import catalog

STYLE = {"ok": "green", "failed": "red", "timeout": "yellow", "skipped": "dim"}


def kick_the_tires(
    budget: Annotated[
        float, typer.Option("--budget", help="seconds for everything, report and bundle included (stack setup not)")
    ] = kick.DEFAULT_BUDGET_S,
    results: Annotated[Path, typer.Option("--results", "-r", help="results folder")] = Path("results-kick-the-tires"),
    device: Annotated[str, typer.Option(help="auto (the GPU plan where PyTorch sees a GPU) | cpu | cuda")] = "auto",
    framework: Annotated[
        list[str] | None,
        typer.Option("--framework", "-f", help="default: the installed or adopted stacks on a CPU, pytorch on a GPU"),
    ] = None,
    show_plan: Annotated[
        bool, typer.Option("--plan", help="print the steps, the times assumed and what fits the budget; run nothing")
    ] = False,
    setup: Annotated[
        bool,
        typer.Option("--setup", help="install a missing stack first (only from a lock made for this Python)"),
    ] = False,
) -> None:
    """Every instrument once inside a budget: on a GPU doctor, calibrate, ResNet-50 fp32 and its Nsight Compute pass,
    Deep Speech 2 fp32, then amp and tf32, report and bundle; on a CPU each installed stack's smoke run, report and
    bundle. Exits non-zero when no measuring step ran."""
    kick.check_budget(budget)
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise UserError(f"--device must be auto, cpu or cuda, not '{device}'.")
    chosen, why = kick.choose_device(device)
    model = catalog.get("deepspeech2")
    folder = results.resolve()
    frameworks = stacks_for(model, split_list(framework), chosen, setup, plan_only=show_plan)
    steps = kick.plan(chosen, folder, frameworks)
    if show_plan:
        console.print(
            f"kick-the-tires --plan: the {'GPU' if chosen == 'cuda' else 'CPU'} plan ({why}), {budget:.0f} s budget",
            highlight=False,
        )
        console.print(Text(kick.plan_text(kick.forecast(steps, budget), budget).rstrip()), highlight=False)
        nothing = kick.fits_nothing(steps, budget)
        if nothing is not None:
            console.print(Text(nothing, style="red"), highlight=False)
        raise typer.Exit(1 if nothing is not None else 0)
    nothing = kick.fits_nothing(steps, budget)
    if nothing is not None:
        raise UserError(nothing)
    kick.check_results(folder)
    frameworks = choose_frameworks(model, frameworks, setup=setup)  # a stack installed only when asked
    steps = kick.plan(chosen, folder, frameworks)
    console.print(
        f"kick-the-tires: the {'GPU' if chosen == 'cuda' else 'CPU'} plan ({why}), {len(steps)} steps, "
        f"{budget:.0f} s budget; results in {results}",
        highlight=False,
    )
    console.print(Text(kick.plan_text(kick.forecast(steps, budget), budget).rstrip()), highlight=False)

    def line(o: kick.Outcome, elapsed: float) -> None:
        style = STYLE.get(o.status, "")
        console.print(
            Text.assemble(f"  [{elapsed:4.0f} s] {o.step}: ", (o.status, style), f" {o.seconds:.0f} s {o.note}"),
            highlight=False,
        )
        console.file.flush()  # a line per step as it ends, also into a pipe or a log

    outcomes = kick.run(steps, budget, folder, on_step=line)
    table = Table(title=f"kick-the-tires — {results}")
    for col in ("step", "status", "s", "cap", "what it gave, or why not"):
        table.add_column(col, justify="right" if col in ("s", "cap") else "left")
    for o in outcomes:
        table.add_row(
            o.step, Text(o.status, style=STYLE.get(o.status, "")), f"{o.seconds:.0f}", f"{o.cap_s:.0f}", o.note
        )
    console.print(table)
    console.print(
        f"steps and logs: {results / kick.FOLDER}; report: {results}-report; bundle: {results}.tar.gz",
        highlight=False,
    )
    code = kick.exit_code(outcomes, steps)
    if code and not any(o.status == "failed" for o in outcomes):
        console.print(
            "nothing was measured: no measuring step ended ok or left a run with numbers (the table says why)",
            highlight=False,
        )
    raise typer.Exit(code)


def stacks_for(model: catalog.Model, wanted: list[str], device: str, setup: bool, plan_only: bool) -> list[str]:
    """The stacks to run: those asked for; else pytorch on a GPU, and on a CPU the installed or adopted ones. A
    missing stack is installed only with --setup, and only from a lock made for this Python (said otherwise)."""
    candidates = [fw for fw in model.frameworks if fw in stacks.STACKS]
    installed = [fw for fw in candidates if stacks.state(fw) == "installed"]
    if device == "cuda":
        chosen = [wanted[0]] if wanted else ["pytorch"]
    elif wanted and wanted != ["all"]:
        chosen = wanted
    elif plan_only or installed:
        chosen = (installed or candidates) if not setup else candidates
    elif not setup:
        raise UserError(
            "No framework stack is installed or adopted here: run `tbdkit setup pytorch` (or adopt an interpreter "
            "with `tbdkit setup pytorch --adopt PYTHON`), or pass --setup to install the missing stacks."
        )
    else:
        chosen = candidates
    if not setup or plan_only:
        return chosen
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    out = []
    for fw in chosen:
        lock = stacks.lock_of(stacks.get(fw))
        if fw in installed or lock.python == here:
            out.append(fw)
        else:
            console.print(
                f"{fw}: not installed, and its lock ({lock.file.name}) is made for Python {lock.python}, not this "
                f"Python {here}: left out (adopt an interpreter that holds it: `tbdkit setup {fw} --adopt PYTHON`)",
                highlight=False,
            )
    if not out:
        raise UserError(
            f"No stack of {', '.join(chosen)} is installed, and the kit's locks are made for another Python than "
            f"this {here}: adopt an interpreter that holds the framework (`tbdkit setup {chosen[0]} --adopt "
            "PYTHON`), or run the kit with the locks' Python."
        )
    return out
