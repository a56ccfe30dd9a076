"""`tbdkit sweep MODEL`: a grid of runs with live progress, resumable, with the spread of repeats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from tbdkit.analysis import cost
from tbdkit.bench.plan import plan, prepare, split_list
from tbdkit.bench.sweep import FINAL, run_sweep
from tbdkit.cli.common import (
    CpusOpt,
    PinOpt,
    PriceOpt,
    WarmupCapOpt,
    WorkloadsOpt,
    check_cpus,
    cost_table,
    use_workloads,
)
from tbdkit.cli.console import console, err_console
from tbdkit.core.paths import default_results_dir
from tbdkit.results import files as runfiles
from tbdkit.results import outputs
from tbdkit.results.summary import MEASURED, exit_code_of
from tbdkit.spec.sweep_spec import MAX, parse, parse_batch_list


def grid_table(state: dict[str, Any], unit: str) -> Table:
    """Rows: framework/precision; columns: batch entries; a cell: status, mean throughput, spread."""
    spec = state["spec"]
    table = Table(
        title=f"sweep {state['sweep_id']} ({spec['model']}, {spec['preset']} preset, "
        f"{spec['repeat']} repeat(s), CV limit {spec['cv_limit']:.0%}) — throughput in {unit}"
    )
    table.add_column("framework / precision")
    for b in spec["batches"]:
        table.add_column(f"batch {b}", justify="right")
    groups = state.get("groups") or {}
    for fw in spec["frameworks"]:
        for precision in spec["precisions"]:
            cells = []
            for b in spec["batches"]:
                g = groups.get(f"{fw}/{precision}/b{b}") or {}
                statuses = [
                    p["status"]
                    for p in state["points"].values()
                    if (p["framework"], p["precision"], p["batch"]) == (fw, precision, b)
                ]
                cells.append(_cell(g, statuses))
            table.add_row(f"{fw} / {precision}" + (" compiled" if spec.get("graph") == "compiled" else ""), *cells)
    table.caption = (
        "mean over the repeats that finished, ok or disturbed (a cell counts its disturbed ones) "
        "[± sample stdev, CV]; 'max' shows the batch found; unstable: CV above the limit (sweep.json groups.*.unstable)"
    )
    return table


def _cell(group: dict[str, Any], statuses: list[str]) -> Text:
    mean = group.get("throughput_mean")
    head = f"b={group['batch_size']}: " if group.get("batch") == MAX and group.get("batch_size") else ""
    if mean is None:
        shown = ", ".join(sorted(set(statuses))) or "—"
        return Text.assemble(head, (shown, "yellow" if set(statuses) <= {"oom", "pending"} else "red"))
    text = Text(f"{head}{mean:,.2f}")
    if group.get("throughput_stdev") is not None:
        text.append(f" ±{group['throughput_stdev']:,.2f} (CV {group['throughput_cv']:.1%})")
    bad = [s for s in statuses if s not in MEASURED]
    if bad:
        text.append(f" {len(bad)} not ok", "red")
    disturbed = statuses.count("disturbed")
    if disturbed:
        every = disturbed == sum(s in MEASURED for s in statuses)
        text.append(f" {f'all {disturbed}' if every else disturbed} disturbed", "yellow")
    if group.get("unstable"):
        text.append(" unstable", "yellow")
    return text


def sweep(
    model: Annotated[str, typer.Argument(help="model to sweep (see `tbdkit list`)")],
    frameworks: Annotated[
        list[str] | None,
        typer.Option(
            "--frameworks", "--framework", "-f", help="comma list or 'all'; default: every installed one the model has"
        ),
    ] = None,
    batch: Annotated[
        list[str] | None,
        typer.Option(
            "--batch",
            "-b",
            help="batch sizes, e.g. 8,16,32,max (max: the largest that fits); default: the preset's list",
        ),
    ] = None,
    precision: Annotated[
        list[str] | None, typer.Option("--precision", help="comma list of fp32 | tf32 | amp | bf16")
    ] = None,
    graph: Annotated[
        str, typer.Option(help="standard (the paper's) | compiled (torch.compile, XLA, MXNet static shapes)")
    ] = "standard",
    repeat: Annotated[int, typer.Option(help="runs per grid point (their spread is reported)")] = 1,
    preset: Annotated[str, typer.Option(help="smoke | paper | auto (paper with a GPU, else smoke)")] = "auto",
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")] = "auto",
    launcher: Annotated[
        str, typer.Option(help="native | docker | slurm (settings from slurm.toml; auto: native)")
    ] = "native",
    data: Annotated[str, typer.Option(help="'synthetic' or the path of the real dataset")] = "synthetic",
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    cv_limit: Annotated[float, typer.Option(help="flag a point unstable above this coefficient of variation")] = 0.05,
    max_batch_limit: Annotated[int, typer.Option(help="the max-batch search doubles no further than this")] = 4096,
    max_measure_s: Annotated[float | None, typer.Option(help="cap on each sample window, seconds")] = None,
    max_warmup_s: WarmupCapOpt = None,
    target_ci: Annotated[
        float | None, typer.Option(help="stop each window when the 95% CI half-width is below this fraction")
    ] = None,
    memory_limit_mb: Annotated[
        int | None, typer.Option(help="fail as out-of-memory past this many MiB of growth (CPU runs)")
    ] = None,
    cpus: CpusOpt = None,
    pin: PinOpt = False,
    retry_disturbed: Annotated[
        int,
        typer.Option(
            help="re-run a point whose run was disturbed (foreign load, another GPU process, throttling) up to N times"
        ),
    ] = 0,
    results: Annotated[Path, typer.Option("--results", "-r", help="results folder")] = default_results_dir(),
    setup: Annotated[bool, typer.Option("--setup/--no-setup", help="install missing framework stacks first")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the sweep's state as JSON")] = False,
    price_per_hour: PriceOpt = None,
    workloads: WorkloadsOpt = None,
) -> None:
    """Run MODEL over a grid of frameworks x precisions x batch sizes (x repeats); rerun to resume."""
    use_workloads(workloads)
    prices = cost.resolve(price_per_hour)  # a wrong price is said before anything runs
    outputs.check_name(results, "--results")
    p = plan(model, frameworks, preset, device, launcher, data=data)  # a sweep's points run on one machine
    caps = {"max_measure_s": max_measure_s, "max_warmup_s": max_warmup_s, "target_ci": target_ci}
    measure = {k: v for k, v in caps.items() if v is not None}
    fields: dict[str, Any] = {
        "model": model,
        "frameworks": p.requested or list(p.model.frameworks),
        "batches": parse_batch_list(split_list(batch))
        or list(p.hp().get("batch_sizes") or [p.model.default_batch(p.preset)]),
        "precisions": split_list(precision) or ["fp32"],
        "graph": graph,
        "preset": p.preset,
        "repeat": repeat,
        "launcher": p.launcher,
        "results": str(results),
        "device": device,
        "data": p.data,
        "seed": seed,
        "cv_limit": cv_limit,
        "max_batch_limit": max_batch_limit,
        "memory_limit_mb": memory_limit_mb,
        "measure": measure,
        "cpus": check_cpus(cpus),
        "pin": pin,
        "retry_disturbed": retry_disturbed,
    }
    parse(fields)  # the whole grid is valid before anything installs or runs
    spec = parse({**fields, "frameworks": prepare(p, device, setup)})
    state = run_sweep(spec, p.model.throughput_unit, quiet_stdout=as_json, preflighted=True)
    if as_json:
        print(json.dumps(state, indent=2))
    else:
        console.print(grid_table(state, p.model.throughput_unit))
        if prices is not None:
            console.print(cost_table(_ok_summaries(state, spec.results), spec.results, prices))
        console.print(f"sweep state: {spec.state_dir() / runfiles.SWEEP_STATE}", highlight=False)
    stopped = state.get("interrupted")
    if stopped:
        (err_console if as_json else console).print(
            _interrupted_sentence(state, stopped), highlight=False, markup=False, soft_wrap=True
        )
    statuses = {p["status"] for p in state["points"].values()}
    raise typer.Exit(exit_code_of(statuses, interrupted=bool(stopped)))


def _interrupted_sentence(state: dict[str, Any], stopped: dict[str, Any]) -> str:
    """Where a Ctrl-C stopped the sweep, what became of that point's run, and how to resume."""
    done = sum(p["status"] in FINAL for p in state["points"].values())
    return (
        f"Sweep interrupted (Ctrl-C) at {stopped['at']}, whose run "
        + ("kept what it measured" if stopped["kept"] else f"ended {stopped['status']} and runs again")
        + f"; the points after it were not started: run the same command again to resume it ({done} of "
        f"{len(state['points'])} point(s) done are kept)."
    )


def _ok_summaries(state: dict[str, Any], results: Path) -> list[dict[str, Any]]:
    """The summaries of the sweep's points that finished ok, in grid order."""
    from tbdkit.results import summary as summaries

    out = []
    for p in state["points"].values():
        if p.get("status") in MEASURED and p.get("run_id"):
            try:
                out.append(summaries.read(results / p["run_id"]))
            except (OSError, summaries.Unreadable):
                continue
    return out
