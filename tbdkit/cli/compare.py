"""`tbdkit compare RUN [--against RUN2 | --reference]`: one run's throughput against another's, with a verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tbdkit import compare as comparing
from tbdkit.cli.common import ResultsOpt
from tbdkit.console import console
from tbdkit.errors import UserError
from tbdkit.paths import default_results_dir, workloads_dir
from tbdkit.store import Index


def _run_dir(run: str, results: Path) -> Path:
    """A run folder given as its path, or as its id (or unique part of it, or 'last') in `results`."""
    if Path(run).is_dir():
        return Path(run)
    path = Index(results).find(run) if results.is_dir() else None
    if path is None:
        raise UserError(
            f"No run folder '{run}' and no run matching it in {results}: pass a run's folder or id "
            "(`tbdkit runs` lists them)."
        )
    return Path(path)


def compare(
    run: Annotated[str, typer.Argument(help="run A: its folder, or its id (unique part, or 'last') in --results")],
    against: Annotated[str | None, typer.Option("--against", help="run B, as RUN")] = None,
    reference: Annotated[
        bool,
        typer.Option(
            "--reference",
            help="run B is the committed reference for the same "
            "model, framework, preset, precision, batch and GPU product",
        ),
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="compare unlike runs, listing every difference")] = False,
    results: ResultsOpt = default_results_dir(),
    as_json: Annotated[bool, typer.Option("--json", help="print the comparison as JSON")] = False,
) -> None:
    """Run A's throughput against run B's: the ratio with a 95% CI and a verdict (faster, slower, same within noise)."""
    if (against is None) == (not reference):
        raise UserError("Say what to compare against: --against RUN2 or --reference (one of them).")
    a = comparing.load(_run_dir(run, results))
    if reference:
        b = comparing.matching_reference(a, workloads_dir())
        if b is None:
            raise UserError(comparing.no_reference_sentence(a, workloads_dir()))
    else:
        assert against is not None
        b = comparing.load(_run_dir(against, results))
    result = comparing.compare(a, b, force)
    if as_json:
        print(json.dumps(result.as_json(), indent=2, default=str))
        return
    table = Table(title="Throughput")
    for col in ("", "run", "throughput", "±95%", "from"):
        table.add_column(col)
    for tag, side in (("A", a), ("B", b)):
        table.add_row(
            tag,
            escape(side.label),
            f"{side.throughput:,.4g} {escape(side.unit)}",
            f"{side.ci95_relative:.2%}",
            escape(side.source),
        )
    console.print(table)
    style = {"faster": "green", "slower": "red"}.get(result.verdict, "cyan")
    console.print(f"[bold {style}]{escape(result.sentence())}[/]")
    console.print(f"[dim]{escape(result.method)}[/]")
    if result.unlike:
        console.print("[yellow]Compared with --force although unlike:[/]")
    rows = result.unlike + result.differences
    if rows:
        diff = Table(title="What differs")
        for col in ("field", "A", "B"):
            diff.add_column(col, overflow="fold")
        for name, va, vb in rows:
            diff.add_row(escape(name), escape(str(va)), escape(str(vb)))
        console.print(diff)
