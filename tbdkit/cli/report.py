"""`tbdkit report`: the CLI face of tbdkit.report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tbdkit.analysis import cost
from tbdkit.cli.common import PriceOpt, WorkloadsOpt, use_workloads
from tbdkit.cli.console import console, err_console, styled
from tbdkit.core.paths import default_results_dir, existing_results_dir
from tbdkit.results import outputs
from tbdkit.results.index import Index


def report(
    results: Annotated[Path | None, typer.Argument(help="results folder (default: results)")] = None,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="folder for report.html, report.md, summary.csv, figures/")
    ] = Path("report"),
    include_disturbed: Annotated[
        bool,
        typer.Option(
            "--include-disturbed",
            help="check the paper's claims on disturbed runs too (foreign load, another GPU "
            "process or throttling in their window); they are always drawn, hollow",
        ),
    ] = False,
    price_per_hour: PriceOpt = None,
    with_compiled: Annotated[
        bool,
        typer.Option(
            "--with-compiled",
            help="draw compiled-graph runs in the paper's figures and claim checks too (as series of their "
            "own); by default they keep the paper's settings, standard graphs",
        ),
    ] = False,
    workloads: WorkloadsOpt = None,
) -> None:
    """The paper's figures, tables and claim checks for the runs in RESULTS."""
    use_workloads(workloads)
    from tbdkit.report import make_report

    results = existing_results_dir(results or default_results_dir())  # before anything is written
    outputs.check_folder(out, "-o")
    built = make_report(results, out, include_disturbed, cost.resolve(price_per_hour), with_compiled)
    index = Index(results)
    index.runs()
    for line in index.unreadable:  # damaged runs are left out of the report, and named
        err_console.print(line, style="yellow", highlight=False)
    console.print(built.grouping, highlight=False)
    console.print(built.disturbed_text, style="yellow" if built.disturbed else None, highlight=False)
    html = built.html
    for v in built.verdicts:
        color = {"holds": "green", "does not hold": "red"}.get(v.verdict, "yellow")
        console.print(styled(f"  {v.n:>2}. [{color}]{{}}[/] {{}}", f"{v.verdict:<16}", v.claim))
    console.print(
        f"report: {html} (also {out / 'report.md'}, {out / 'summary.csv'}, {out / 'figures'}/)", highlight=False
    )
