"""The tbdkit command line (Typer + rich): bench, list, show, runs, doctor, setup, describe, overhead."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from tbdkit import catalog, stacks
from tbdkit import spec as specs
from tbdkit.choice import (
    choose_frameworks,
    framework_gpus,
    parse_batches,
    require_framework_gpus,
    resolve_auto_preset,
    split_list,
)
from tbdkit.console import console, convergence_table, err_console, results_table
from tbdkit.errors import UserError
from tbdkit.paths import default_results_dir, existing_results_dir
from tbdkit.results import summary as summaries
from tbdkit.run_list import run_all
from tbdkit.store import Index

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="tbdkit: the TBD training benchmark, measured the same way every time.")

ResultsOpt = Annotated[Path, typer.Option("--results", "-r", help="results folder")]
SHOWN_MATCHES = 10  # run ids listed when a prefix given to `show` matches several


def _friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """User errors become one red sentence and exit code 2, never a traceback."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            # UserError, and a workload's DataError (workloads cannot import the kit's class)
            if not isinstance(exc, UserError) and not catalog.is_data_error(exc):
                raise
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
            raise typer.Exit(2) from None
    return wrapper


@app.command()
@_friendly
def bench(
    model: Annotated[str, typer.Option("--model", "-m", help="model to train (see `tbdkit list`)")] = "deepspeech2",
    framework: Annotated[list[str] | None, typer.Option("--framework", "-f",
                         help="framework(s), comma list or 'all'; default: every installed one the model has")] = None,
    batch: Annotated[list[str] | None, typer.Option("--batch", "-b", help="batch size(s), e.g. 8,16,32")] = None,
    precision: Annotated[str, typer.Option(help="fp32 (TF32 off) | tf32 | amp")] = "fp32",
    preset: Annotated[str, typer.Option(help="smoke | paper | auto (paper with a GPU, else smoke) | converge "
                                        "(train to the model's quality target and record the curve; PyTorch)")] = "auto",
    variant: Annotated[str | None, typer.Option(help="another setting of the model ([setting.<name>] in its "
                                                   "workload.toml, e.g. bert's pretrain512 or squad)")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")] = "auto",
    launcher: Annotated[str, typer.Option(help="auto (netns for several nodes, else native) | native | docker | netns")] = "auto",
    nodes: Annotated[int, typer.Option(help="machines of a data-parallel job (with --launcher netns here)")] = 1,
    gpus_per_node: Annotated[int, typer.Option(help="workers per machine (GPUs; processes on CPUs); batch is per worker")] = 1,
    link_rate: Annotated[str | None, typer.Option(help="shape each node's link, e.g. 1gbit (--launcher netns)")] = None,
    data: Annotated[str, typer.Option(help="'synthetic' or the path of the real dataset")] = "synthetic",
    seed: Annotated[int, typer.Option(help="random seed (recorded in env.json)")] = 0,
    max_measure_s: Annotated[float | None, typer.Option(help="cap on the sample window, seconds")] = None,
    max_warmup_s: Annotated[float | None, typer.Option(help="cap on warm-up, seconds")] = None,
    target_ci: Annotated[float | None, typer.Option(help="stop when the 95% CI half-width is below this fraction")] = None,
    memory_limit_mb: Annotated[int | None, typer.Option(
        help="fail as out-of-memory past this many MiB of growth (CPU runs; protects the host)")] = None,
    results: ResultsOpt = default_results_dir(),
    setup: Annotated[bool, typer.Option("--setup/--no-setup", help="install missing framework stacks first")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the summaries as JSON")] = False,
) -> None:
    """Train MODEL on each framework and batch size, measuring throughput and utilization."""
    m = catalog.get(model)
    if launcher == "auto":  # several "machines" here are network namespaces; one is this machine
        launcher = "netns" if nodes > 1 else "native"
    wanted = split_list(framework)
    candidates = (list(m.frameworks) if wanted == ["all"] else wanted or
                  [fw for fw in m.frameworks if fw in stacks.STACKS and stacks.is_installed(fw)] or list(m.frameworks[:1]))
    if preset == "auto":
        preset = resolve_auto_preset(device, candidates, launcher)
    elif device.startswith("cuda") and launcher != "docker":  # the framework itself says why it has no GPU
        require_framework_gpus(device, {fw: framework_gpus(fw) for fw in candidates})
    hp = m.hp(preset, variant)
    batches = parse_batches(batch) or [int(hp["default_batch"])]
    measure = {k: v for k, v in {"max_measure_s": max_measure_s, "max_warmup_s": max_warmup_s,
                                 "target_ci": target_ci}.items() if v is not None}
    if data != "synthetic":
        data = str(Path(data).expanduser().resolve())

    def make(fw: str, b: int) -> specs.RunSpec:
        return specs.build(model=model, framework=fw, batch_size=b, precision=precision, preset=preset,
                           variant=variant, device=device, launcher=launcher, data=data, seed=seed, measure=measure,
                           memory_limit_mb=memory_limit_mb, nodes=nodes, gpus_per_node=gpus_per_node,
                           link_rate=link_rate)

    # Validate every spec of the grid before anything installs or runs.
    requested = split_list(framework) or (["pytorch"] if preset == "converge" else [])
    for fw in (list(m.frameworks) if requested == ["all"] else requested or list(m.frameworks[:1])):
        for b in batches:
            make(fw, b)
    if data != "synthetic":
        catalog.load_module(m, "data").check_source(data, hp)
    if launcher == "docker":  # the image is the environment: no virtual environment needed
        from tbdkit.launch import docker as docker_launch

        frameworks = docker_launch.frameworks(m, requested)
        for fw in frameworks:
            docker_launch.preflight(fw, device)
    else:
        frameworks = choose_frameworks(m, requested, setup)
    run_specs = [make(fw, b) for fw in frameworks for b in batches]
    summaries = run_all(run_specs, results, m.throughput_unit, quiet_stdout=as_json)
    if as_json:
        print(json.dumps(summaries, indent=2))
    else:
        table = convergence_table if preset == "converge" else results_table
        console.print(table(summaries, title=f"{m.info.get('title', model)} ({preset} preset) — results in {results}"))
    statuses = {s["status"] for s in summaries}
    raise typer.Exit(0 if statuses == {"ok"} else 130 if "interrupted" in statuses else 1)


@app.command("list")
@_friendly
def list_models() -> None:
    """Models × frameworks × presets the kit can run, and which stacks are installed here."""
    table = Table(title="Models")
    table.add_column("model")
    table.add_column("application")
    table.add_column("throughput unit")
    for fw in stacks.KNOWN_FRAMEWORKS:
        table.add_column(fw)
    table.add_column("presets (default batch)")
    for m in catalog.models().values():
        cells = []
        for fw in stacks.KNOWN_FRAMEWORKS:
            if fw not in m.frameworks:
                cells.append("[dim]—[/]")
            else:
                cells.append("[green]installed[/]" if stacks.is_installed(fw) else "[yellow]not installed[/]")
        presets = ", ".join(f"{p} ({m.default_batch(p)})" for p in m.presets)
        table.add_row(m.name, m.info.get("application", ""), m.throughput_unit, *cells, presets)
    console.print(table)


@app.command()
@_friendly
def show(run: Annotated[str, typer.Argument(help="run id (or a unique prefix/suffix, or 'last')")],
         results: ResultsOpt = default_results_dir(),
         as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """One run's summary: every metric with its unit and method."""
    index = Index(existing_results_dir(results))
    path = index.find(run)
    if path is None:
        hits = [r["run_id"] for r in index.runs() if r["run_id"].startswith(run) or r["run_id"].endswith(run)]
        if len(hits) > 1:
            shown = ", ".join(hits[:SHOWN_MATCHES]) + (f" and {len(hits) - SHOWN_MATCHES} more"
                                                       if len(hits) > SHOWN_MATCHES else "")
            raise UserError(f"'{run}' is ambiguous in {results}: it matches {len(hits)} runs ({shown}); "
                            "pass more of the run id.")
        raise UserError(f"No run matches '{run}' in {results}: list them with `tbdkit runs`.")
    try:
        summary = summaries.read(path)
    except (OSError, summaries.Unreadable) as exc:
        raise UserError(escape(f"{exc}: the run folder {path} is damaged; its other files are kept as they are.")) from None
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
        table.add_row(name, "null" if value is None else f"{value:,.4g}", m.get("unit", ""),
                      m.get("reason") and f"[yellow]{escape(m['reason'])}[/]" or escape(m.get("method") or ""))
    console.print(table)
    for key in ("warmup", "window"):
        if summary.get(key):
            console.print(f"[bold]{key}[/]: {escape(str(summary[key]))}", highlight=False)
    if summary.get("unstable"):
        console.print(f"[yellow]unstable:[/] {escape(str(summary.get('instability_reason')))}", highlight=False)
    if summary.get("error"):
        console.print(f"[red]error:[/] {escape(summary['error'])}", highlight=False)


@app.command()
@_friendly
def runs(results: ResultsOpt = default_results_dir(),
         model: Annotated[str | None, typer.Option(help="only this model")] = None,
         rebuild: Annotated[bool, typer.Option("--rebuild", help="rebuild the index from the run folders")] = False,
         as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The results index (SQLite, rebuilt from the run folders when lost)."""
    index = Index(existing_results_dir(results))
    if rebuild:
        console.print(f"indexed {index.rebuild()} runs")
    rows = index.runs(model=model)
    for line in index.unreadable:  # a damaged run is named and skipped, never fatal
        err_console.print(line, style="yellow", highlight=False, markup=False)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"Runs in {results}")
    cols = ("run_id", "status", "model", "framework", "batch_size", "precision", "device", "throughput",
            "throughput_unit", "cpu_utilization", "gpu_utilization")
    for c in cols:
        table.add_column(c)
    for r in rows:
        table.add_row(*("—" if r[c] is None else f"{r[c]:,.2f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    console.print(table)


@app.command()
@_friendly
def doctor(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """What this machine has: GPU, driver, NVML, Docker, frameworks, profiling counters."""
    from tbdkit import doctor as doc

    checks = doc.checks()
    if as_json:
        print(json.dumps(doc.as_dict(checks), indent=2))
        return
    table = Table(title="tbdkit doctor")
    for col in ("area", "check", "", "found", "fix"):
        table.add_column(col)
    for c in checks:
        mark = {True: "[green]yes[/]", False: "[red]no[/]", None: "[dim]n/a[/]"}[c.ok]
        table.add_row(c.area, c.name, mark, c.detail, c.fix or "")
    console.print(table)


@app.command()
@_friendly
def setup(names: Annotated[list[str] | None, typer.Argument(help="stacks to install, or 'all' (default: pytorch)")] = None,
          force: Annotated[bool, typer.Option(help="reinstall even if current")] = False) -> None:
    """Create each framework stack's virtual environment (idempotent)."""
    for name in [n for raw in split_list(names) or ["pytorch"] for n in (stacks.STACKS if raw == "all" else [raw])]:
        stack = stacks.get(name)
        if stacks.is_current(name) and not force:
            console.print(f"{stack.title} stack: already installed in {stacks.venv_path(name)}")
            continue
        with console.status(f"installing the {stack.title} stack in {stacks.venv_path(name)} ..."):
            record = stacks.setup(name, force=force)
        console.print(f"{stack.title} stack: installed {stack.module} {record.get('framework_version')} "
                      f"in {stacks.venv_path(name)}")


@app.command()
@_friendly
def describe(model: Annotated[str, typer.Argument(help="model (see `tbdkit list`)")],
             framework: Annotated[str, typer.Option("--framework", "-f", help="pytorch | tensorflow | mxnet")] = "pytorch",
             preset: Annotated[str, typer.Option(help="smoke | paper")] = "smoke",
             as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The network as FRAMEWORK builds it: parameters, per-layer shapes (canonical order), FLOPs per sample."""
    from tbdkit.describe import in_stack

    info = in_stack(model, framework, preset)
    if as_json:
        print(json.dumps(info, indent=2))
        return
    table = Table(title=f"{model} on {framework} {info['framework_version']} ({preset} preset)")
    for col in ("layer", "parameters (canonical layout)", "positions/sample", "forward FLOPs"):
        table.add_column(col)
    for layer in info["layers"]:
        shapes = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in layer["params"].items())
        table.add_row(layer["name"], shapes, f"{layer['positions_per_sample']:,}", f"{layer['forward_flops']:,}")
    console.print(table)
    flops = info["flops_per_sample"]
    ref = flops["reference_sample"]
    console.print(f"parameters: {info['parameters']:,}; FLOPs per sample (input {ref['input_shape']}, "
                  f"{ref['work']:g} {ref['work_unit']}): "
                  f"forward {flops['forward']:,}, training {flops['training']:,}", highlight=False)


@app.command()
@_friendly
def overhead(model: Annotated[str, typer.Option("--model", "-m")] = "deepspeech2",
             framework: Annotated[str, typer.Option("--framework", "-f")] = "pytorch",
             preset: Annotated[str, typer.Option()] = "smoke",
             rounds: Annotated[int, typer.Option(help="bare/instrumented block pairs")] = 6) -> None:
    """Benchmark the collectors' cost: instrumented throughput / bare loop throughput, one run."""
    import subprocess

    from tbdkit.launch.base import parse_event

    m = catalog.get(model)
    catalog.check_framework(m, framework)
    python = stacks.require(framework)
    cmd = [str(python), "-u", "-m", "tbdkit.agent.overhead", "--model", model, "--framework", framework,
           "--preset", preset, "--rounds", str(rounds)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=stacks.agent_env())
    result = None
    assert proc.stdout is not None
    for line in proc.stdout:
        event = parse_event(line)
        if event and event.get("event") == "overhead":
            result = event
    if proc.wait() != 0 or result is None:
        raise UserError(f"The overhead benchmark failed (exit {proc.returncode}); its messages are above.")
    console.print(
        f"[bold]collector overhead[/] {model}/{framework} ({preset}, batch {result['batch_size']}, "
        f"{result['device']}): bare {result['bare_throughput']:.3f}, with collectors "
        f"{result['collected_throughput']:.3f} {result['unit']} over {result['rounds']} alternating rounds "
        f"of {result['iterations_per_block']} iterations")
    console.print(f"[bold]ratio (with collectors / bare) = {result['ratio']:.4f}[/]  "
                  f"(per round: {', '.join(f'{r:.4f}' for r in result['ratio_per_round'])})")


def _sub_apps() -> None:
    from tbdkit import data_cli, images_cli

    for sub, name in ((images_cli.app, "images"), (data_cli.app, "data")):
        for command in sub.registered_commands:
            if command.callback is not None:
                command.callback = _friendly(command.callback)
        app.add_typer(sub, name=name)


_sub_apps()
from tbdkit import artifact_cli, calibrate_cli, render_cli, report_cli, sweep_cli  # noqa: E402  (commands in their own modules)

for _command in (sweep_cli.sweep, report_cli.report, artifact_cli.bundle, artifact_cli.reproduce, render_cli.render,
                 calibrate_cli.calibrate):
    app.command()(_friendly(_command))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
