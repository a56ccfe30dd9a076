"""`tbdkit kick-the-tires`: every instrument once inside a time budget (its logic: tbdkit.bench.kick)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from tbdkit.bench import kick
from tbdkit.bench.plan import choose_frameworks, split_list
from tbdkit.cli.console import console
from tbdkit.core.errors import UserError
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
        typer.Option("--framework", "-f", help="default: every stack on a CPU, pytorch on a GPU"),
    ] = None,
) -> None:
    """Every instrument once inside a budget: on a GPU doctor, calibrate, ResNet-50 and Deep Speech 2 in fp32, amp
    and tf32, one Nsight Compute pass, report and bundle; on a CPU every stack's smoke run, report and bundle."""
    if budget <= 0:
        raise UserError(f"--budget must be a number of seconds above 0, not {budget:g}.")
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise UserError(f"--device must be auto, cpu or cuda, not '{device}'.")
    chosen, why = kick.choose_device(device)
    model = catalog.get("deepspeech2")
    wanted = split_list(framework) or (["all"] if chosen == "cpu" else ["pytorch"])
    frameworks = choose_frameworks(model, wanted, setup=True)  # installs what is missing, before the clock
    folder = results.resolve()
    steps = kick.plan(chosen, folder, frameworks)
    console.print(
        f"kick-the-tires: the {'GPU' if chosen == 'cuda' else 'CPU'} plan ({why}), {len(steps)} steps, "
        f"{budget:.0f} s budget; results in {results}",
        highlight=False,
    )

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
    raise typer.Exit(kick.exit_code(outcomes))
