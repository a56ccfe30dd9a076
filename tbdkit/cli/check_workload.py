"""`tbdkit check-workload DIR|MODEL`: a model folder against the contract and the checks every built-in model
passes, as a table of what passed, failed or was skipped and why; exit 1 on a failure."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from tbdkit.cli.console import console

STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow"}


def check_workload(
    target: Annotated[str, typer.Argument(help="a model folder (holding workload.toml) or a model's name")],
    framework: Annotated[str | None, typer.Option("--framework", "-f", help="one framework (default: each)")] = None,
    graph: Annotated[str, typer.Option(help="standard | compiled (compiled also runs the compiled and bf16 steps)")] = (
        "standard"
    ),
) -> None:
    """Check a workload folder: the contract, its parameter count, a few steps that lower the loss, each math mode,
    the analyses a bench run takes after its window (memory breakdown, FLOPs), only model code in its files; the paper
    preset's size; with --graph compiled, the compiled and bf16 steps; its frameworks' networks and their outputs for
    the same weights."""
    if graph not in ("standard", "compiled"):
        raise typer.BadParameter("choose standard or compiled", param_hint="--graph")
    from tbdkit.bench import check_workload as checks  # NumPy and the contract: loaded by this command alone

    outcomes = checks.check(target, framework, graph)
    table = Table(title=f"check-workload {target}")
    for column in ("check", "framework", "result", "why"):
        table.add_column(column, overflow="fold")
    for o in outcomes:
        status = o["status"]
        table.add_row(Text(o["check"]), Text(o["framework"]), Text(status, style=STYLE[status]), Text(o["detail"]))
    console.print(table)
    if checks.failed(outcomes):
        raise typer.Exit(1)
