"""`tbdkit sweep MODEL`: a grid of runs with live progress, resumable, with the spread of repeats."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from tbdkit.analysis import cost
from tbdkit.bench.plan import choose_frameworks, resolve_auto_preset, split_list
from tbdkit.bench.sweep import FINAL, Runner, RunResult, SweepRun
from tbdkit.cli.common import CpusOpt, PinOpt, PriceOpt, check_cpus, cost_table
from tbdkit.cli.console import RunProgress, console, make_progress, styled
from tbdkit.core.paths import default_results_dir
from tbdkit.results import files as runfiles
from tbdkit.results.index import Index
from tbdkit.results.summary import MEASURED
from tbdkit.spec import catalog
from tbdkit.spec.run_spec import RunSpec
from tbdkit.spec.sweep_spec import MAX, Point, SweepSpec, parse, parse_batch_list


class SweepProgress:
    """The grid's bar (points done / failed / pending, ETA) above one bar per run."""

    def __init__(self, progress: Progress, run: SweepRun, unit: str) -> None:
        self.progress = progress
        self.run = run
        self.unit = unit
        counts = run.state.counts(run.keys())
        self.task = progress.add_task(
            f"sweep of {len(run.keys())} points",
            total=len(run.keys()),
            completed=counts["done"],
            phase=self._phase(),
            rate="",
        )

    def _phase(self) -> str:
        c = self.run.state.counts(self.run.keys())
        return f"done {c['done']} · failed {c['failed']} · pending {c['pending']}"

    def handler(self, label: str) -> RunProgress:
        return RunProgress(self.progress, label, self.unit)

    def point_started(self, point: Point, batch_size: int) -> None:
        self.progress.update(self.task, phase=self._phase(), rate=f"now {point.key} (batch {batch_size})")

    def point_finished(self, point: Point, status: str) -> None:
        self.progress.update(self.task, advance=1, phase=self._phase(), rate="")
        if status not in FINAL:
            self.progress.console.print(
                styled("[red]{}: {}[/] (retried when the sweep is run again)", point.key, status)
            )

    def point_retried(self, point: Point, attempt: int, of: int, reasons: list[str]) -> None:
        self.progress.console.print(
            styled(
                "[yellow]{}: disturbed[/] ({}): re-running it (retry {} of {}, --retry-disturbed); the disturbed "
                "run is kept",
                point.key,
                "; ".join(reasons) or "flagged",
                attempt,
                of,
            )
        )

    def probe_started(self, framework: str, precision: str, batch_size: int) -> None:
        self.progress.update(self.task, rate=f"max-batch search {framework}/{precision}: probing batch {batch_size}")


def bench_runner(
    results: Path, progress: SweepProgress, run_dir_created: Callable[[Path], None] | None = None
) -> Runner:
    """Each point through the bench machinery: the spec's launcher, then the results index.
    `run_dir_created` hears each measured point's run folder as soon as the launcher makes it."""
    from tbdkit.launch import launch

    def run(spec: RunSpec, where: Path, probe: bool) -> RunResult:
        label = f"{'probe ' if probe else ''}{spec.framework}/{spec.precision}/b{spec.batch_size}"
        shown = progress.handler(label)

        def handler(event: dict[str, Any]) -> None:
            if event.get("event") == "run_dir":
                if run_dir_created is not None and not probe:
                    run_dir_created(Path(event["run_dir"]))
                return
            shown(event)

        outcome = launch(spec, where, handler)
        if not probe:
            Index(results).add(outcome.run_dir)
        return RunResult(outcome.status, outcome.run_id, outcome.run_dir, outcome.summary)

    return run


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
            table.add_row(f"{fw} / {precision}", *cells)
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
    precision: Annotated[list[str] | None, typer.Option("--precision", help="comma list of fp32 | tf32 | amp")] = None,
    repeat: Annotated[int, typer.Option(help="runs per grid point (their spread is reported)")] = 1,
    preset: Annotated[str, typer.Option(help="smoke | paper | auto (paper with a GPU, else smoke)")] = "auto",
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")] = "auto",
    launcher: Annotated[str, typer.Option(help="native | docker (auto: native)")] = "native",
    data: Annotated[str, typer.Option(help="'synthetic' or the path of the real dataset")] = "synthetic",
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    cv_limit: Annotated[float, typer.Option(help="flag a point unstable above this coefficient of variation")] = 0.05,
    max_batch_limit: Annotated[int, typer.Option(help="the max-batch search doubles no further than this")] = 4096,
    max_measure_s: Annotated[float | None, typer.Option(help="cap on each sample window, seconds")] = None,
    max_warmup_s: Annotated[float | None, typer.Option(help="cap on each warm-up, seconds")] = None,
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
) -> None:
    """Run MODEL over a grid of frameworks x precisions x batch sizes (x repeats); rerun to resume."""
    prices = cost.resolve(price_per_hour)  # a wrong price is said before anything runs
    m = catalog.get(model)
    if preset == "auto":  # every framework of the sweep is asked whether it sees a GPU
        wanted = split_list(frameworks)
        preset = resolve_auto_preset(device, wanted if wanted and wanted != ["all"] else list(m.frameworks), launcher)
    requested = split_list(frameworks)
    launcher = "native" if launcher == "auto" else launcher  # a sweep's points run on one machine
    measure = {k: v for k, v in {"max_measure_s": max_measure_s, "max_warmup_s": max_warmup_s}.items() if v is not None}
    if data != "synthetic":
        data = str(Path(data).expanduser().resolve())
    fields: dict[str, Any] = {
        "model": model,
        "frameworks": requested if requested and requested != ["all"] else list(m.frameworks),
        "batches": parse_batch_list(split_list(batch))
        or list(m.hp(preset).get("batch_sizes") or [m.default_batch(preset)]),
        "precisions": split_list(precision) or ["fp32"],
        "preset": preset,
        "repeat": repeat,
        "launcher": launcher,
        "results": str(results),
        "device": device,
        "data": data,
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
    if data != "synthetic":
        catalog.check_source(m, data, m.hp(preset))
    if launcher == "docker":
        from tbdkit.launch import docker as docker_launch

        chosen = docker_launch.frameworks(m, requested)
        for fw in chosen:
            docker_launch.preflight(fw, device)
    else:
        chosen = choose_frameworks(m, requested, setup)
    spec = parse({**fields, "frameworks": chosen})
    from tbdkit.results.space import check_results_folder

    # the sweep's state is written before any run: a read-only, full or mistaken results path fails first
    check_results_folder(spec.results, spec.run_spec(chosen[0], spec.precisions[0], (spec.int_batches or [1])[0]))
    state = run_sweep(spec, m.throughput_unit, quiet_stdout=as_json)
    if as_json:
        print(json.dumps(state, indent=2))
    else:
        console.print(grid_table(state, m.throughput_unit))
        if prices is not None:
            console.print(cost_table(_ok_summaries(state, spec.results), spec.results, prices))
        console.print(f"sweep state: {spec.state_dir() / runfiles.SWEEP_STATE}", highlight=False)
    statuses = {p["status"] for p in state["points"].values()}
    raise typer.Exit(0 if statuses <= set(MEASURED) else 130 if "interrupted" in statuses else 1)


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


def run_sweep(spec: SweepSpec, unit: str, quiet_stdout: bool = False) -> dict[str, Any]:
    """Run (or resume) the sweep with live progress; returns its state. Progress goes to stderr
    when stdout carries JSON."""
    progress = make_progress(quiet_stdout, eta=True)
    run = SweepRun(spec)
    observer = SweepProgress(progress, run, unit)
    run.runner, run.observer = bench_runner(spec.results, observer, run.run_dir_created), observer
    for note in run.state.recovered:
        progress.console.print(styled("[yellow]resuming:[/] {}", note), highlight=False)
    counts = run.state.counts(run.keys())
    if counts["done"] or counts["failed"]:
        progress.console.print(
            f"resuming sweep {spec.sweep_id()}: {counts['done']} point(s) done are kept, "
            f"{counts['failed']} failed and {counts['pending']} pending will run",
            highlight=False,
        )
    try:
        with progress:
            return run.run()
    finally:
        Index(spec.results).add_sweep(run.state.data)
