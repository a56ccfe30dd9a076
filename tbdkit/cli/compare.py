"""`tbdkit compare RUN... [--against RUN2... | --reference]`: one side's throughput against another's (a run, or
repeats of one spec each), with a verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tbdkit.analysis import compare as comparing
from tbdkit.cli.common import ResultsOpt
from tbdkit.cli.console import console
from tbdkit.core.errors import UserError
from tbdkit.core.paths import default_results_dir, workloads_dir
from tbdkit.results.index import Index


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
    runs: Annotated[
        list[str],
        typer.Argument(
            help="side A: a run's folder, or its id (unique part, or 'last') in --results; several runs of one "
            "spec (repeats) put run-to-run variation in the interval"
        ),
    ],
    against: Annotated[
        list[str] | None, typer.Option("--against", help="side B, as RUN (repeat the option for each repeat)")
    ] = None,
    reference: Annotated[
        bool,
        typer.Option(
            "--reference",
            help="side B is the committed reference for the same "
            "model, framework, preset, precision, batch and GPU product",
        ),
    ] = False,
    level: Annotated[float, typer.Option("--level", help="the interval's confidence level")] = comparing.LEVEL,
    force: Annotated[bool, typer.Option("--force", help="compare unlike runs, listing every difference")] = False,
    results: ResultsOpt = default_results_dir(),
    as_json: Annotated[bool, typer.Option("--json", help="print the comparison as JSON")] = False,
) -> None:
    """Side A's throughput against side B's: the ratio with its confidence interval (95% unless --level) and a
    verdict (faster, slower, same within noise). One run a side gives each run's own noise; three runs or more in all add the run-to-run variation."""
    if (not against) == (not reference):
        raise UserError("Say what to compare against: --against RUN2 or --reference (one of them).")
    a = [comparing.load(_run_dir(run, results)) for run in runs]
    if reference:
        if len(a) > 1:
            raise UserError(
                "--reference compares one run with its committed reference: pass one run, or use --against."
            )
        ref = comparing.matching_reference(a[0], workloads_dir())
        if ref is None:
            raise UserError(comparing.no_reference_sentence(a[0], workloads_dir()))
        b = [ref]
    else:
        assert against is not None
        b = [comparing.load(_run_dir(run, results)) for run in against]
    result = comparing.compare(a, b, force, level)
    if as_json:
        print(json.dumps(result.as_json(), indent=2, default=str, allow_nan=False))  # JSON has no NaN
        return
    table = Table(title="Throughput")
    for col in ("", "run", "throughput", "±95%", "from"):
        table.add_column(col)
    for tag, sides in (("A", a), ("B", b)):
        for side in sides:
            table.add_row(
                tag,
                side.label,
                f"{side.throughput:,.4g} {side.unit}",
                "—" if side.ci95_relative is None else f"{side.ci95_relative:.2%}",
                side.source,
            )
    console.print(table)
    style = {"faster": "green", "slower": "red"}.get(result.verdict, "cyan")
    console.print(result.sentence(), style=f"bold {style}")
    console.print(result.method, style="dim")
    if result.unlike:
        console.print("Compared with --force although unlike:", style="yellow")
    rows = result.unlike + result.differences
    if rows:
        diff = Table(title="What differs")
        for col in ("field", "A", "B"):
            diff.add_column(col, overflow="fold")
        for name, va, vb in rows:
            diff.add_row(str(name), str(va), str(vb))
        console.print(diff)
