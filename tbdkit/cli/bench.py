"""`tbdkit bench` (train a model on each framework and batch size) and `tbdkit list` (what can run)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from tbdkit.analysis import cost
from tbdkit.bench.plan import parse_batches, plan, prepare
from tbdkit.bench.run_list import run_all
from tbdkit.cli.common import (
    CpusOpt,
    PinOpt,
    PriceOpt,
    ResultsOpt,
    WorkloadsOpt,
    check_cpus,
    cost_table,
    use_workloads,
)
from tbdkit.cli.console import console, convergence_table, results_table, styled
from tbdkit.core.frameworks import KNOWN_FRAMEWORKS
from tbdkit.core.paths import default_results_dir
from tbdkit.env import stacks
from tbdkit.results.summary import MEASURED
from tbdkit.spec import catalog
from tbdkit.spec import run_spec as specs


def bench(
    model: Annotated[str, typer.Option("--model", "-m", help="model to train (see `tbdkit list`)")] = "deepspeech2",
    framework: Annotated[
        list[str] | None,
        typer.Option(
            "--framework", "-f", help="framework(s), comma list or 'all'; default: every installed one the model has"
        ),
    ] = None,
    batch: Annotated[list[str] | None, typer.Option("--batch", "-b", help="batch size(s), e.g. 8,16,32")] = None,
    precision: Annotated[
        str, typer.Option(help="fp32 (TF32 off) | tf32 | amp | bf16 (bfloat16 autocast, no loss scaling)")
    ] = "fp32",
    graph: Annotated[
        str,
        typer.Option(
            help="standard (the paper's: PyTorch eager, TensorFlow tf.function, MXNet hybridized) | compiled "
            "(torch.compile with inductor, XLA, MXNet static shapes; compilation measured apart)"
        ),
    ] = "standard",
    preset: Annotated[
        str,
        typer.Option(
            help="smoke | paper | auto (paper with a GPU, else smoke) | converge "
            "(train to the model's quality target and record the curve; PyTorch)"
        ),
    ] = "auto",
    variant: Annotated[
        str | None,
        typer.Option(
            help="another setting of the model ([setting.<name>] in its "
            "workload.toml, e.g. bert's pretrain512 or squad)"
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")] = "auto",
    launcher: Annotated[
        str, typer.Option(help="auto (netns for several nodes, else native) | native | docker | netns")
    ] = "auto",
    nodes: Annotated[int, typer.Option(help="machines of a data-parallel job (with --launcher netns here)")] = 1,
    gpus_per_node: Annotated[
        int, typer.Option(help="workers per machine (GPUs; processes on CPUs); batch is per worker")
    ] = 1,
    link_rate: Annotated[str | None, typer.Option(help="shape each node's link, e.g. 1gbit (--launcher netns)")] = None,
    one_process: Annotated[
        bool,
        typer.Option(
            "--one-process",
            help="TensorFlow, MXNet: train the --gpus-per-node replicas in one process (MirroredStrategy, "
            "the `device` kvstore), as the paper's single-machine runs did",
        ),
    ] = False,
    data: Annotated[str, typer.Option(help="'synthetic' or the path of the real dataset")] = "synthetic",
    seed: Annotated[int, typer.Option(help="random seed (recorded in env.json)")] = 0,
    max_measure_s: Annotated[float | None, typer.Option(help="cap on the sample window, seconds")] = None,
    max_warmup_s: Annotated[float | None, typer.Option(help="cap on warm-up, seconds")] = None,
    target_ci: Annotated[
        float | None, typer.Option(help="stop when the 95% CI half-width is below this fraction")
    ] = None,
    memory_limit_mb: Annotated[
        int | None,
        typer.Option(help="fail as out-of-memory past this many MiB of growth (CPU runs; protects the host)"),
    ] = None,
    cpus: CpusOpt = None,
    pin: PinOpt = False,
    results: ResultsOpt = default_results_dir(),
    setup: Annotated[bool, typer.Option("--setup/--no-setup", help="install missing framework stacks first")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the summaries as JSON")] = False,
    price_per_hour: PriceOpt = None,
    workloads: WorkloadsOpt = None,
) -> None:
    """Train MODEL on each framework and batch size, measuring throughput and utilization."""
    use_workloads(workloads)
    prices = cost.resolve(price_per_hour)  # a wrong price is said before anything runs
    p = plan(model, framework, preset, device, launcher, nodes, data)
    hp = p.hp(variant)
    batches = parse_batches(batch) or [int(hp["default_batch"])]
    measure = {
        k: v
        for k, v in {"max_measure_s": max_measure_s, "max_warmup_s": max_warmup_s, "target_ci": target_ci}.items()
        if v is not None
    }

    def make(fw: str, b: int) -> specs.RunSpec:
        return specs.build(
            model=model,
            framework=fw,
            batch_size=b,
            precision=precision,
            graph=graph,
            preset=p.preset,
            variant=variant,
            device=device,
            launcher=p.launcher,
            data=p.data,
            seed=seed,
            measure=measure,
            memory_limit_mb=memory_limit_mb,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            link_rate=link_rate,
            one_process=one_process,
            cpus=check_cpus(cpus),
            pin=pin,
        )

    # Validate every spec of the grid before anything installs or runs.
    for fw in p.checked:
        for b in batches:
            make(fw, b)
    frameworks = prepare(p, device, setup, variant)
    run_specs = [make(fw, b) for fw in frameworks for b in batches]
    summaries = run_all(run_specs, results, p.model.throughput_unit, quiet_stdout=as_json)
    if as_json:
        print(json.dumps(summaries, indent=2))
    else:
        table = convergence_table if p.preset == "converge" else results_table
        title = f"{p.model.info.get('title', model)} ({p.preset} preset) — results in {results}"
        console.print(table(summaries, title=title))
        if prices is not None and p.preset != "converge":
            console.print(cost_table(summaries, results, prices))
    statuses = {s["status"] for s in summaries}
    # a disturbed run finished and kept its numbers (flagged, with reasons): not a failure
    raise typer.Exit(0 if statuses <= set(MEASURED) else 130 if "interrupted" in statuses else 1)


def list_models(workloads: WorkloadsOpt = None) -> None:
    """Models × frameworks × presets the kit can run, and which stacks are installed here."""
    use_workloads(workloads)
    table = Table(title="Models")
    table.add_column("model")
    table.add_column("application")
    table.add_column("throughput unit")
    for fw in KNOWN_FRAMEWORKS:
        table.add_column(fw)
    table.add_column("presets (default batch)")
    for m in catalog.models().values():
        cells = []
        for fw in KNOWN_FRAMEWORKS:
            if fw not in m.frameworks:
                cells.append(styled("[dim]—[/]"))
            else:
                cells.append(styled("[green]installed[/]" if stacks.is_installed(fw) else "[yellow]not installed[/]"))
        presets = ", ".join(f"{p} ({m.default_batch(p)})" for p in m.presets)
        table.add_row(m.name, m.info.get("application", ""), m.throughput_unit, *cells, presets)
    yours = [f"{m.name} ({m.origin}): {m.folder}" for m in catalog.models().values() if m.origin != catalog.KIT]
    if yours:
        table.caption = "not the kit's: " + "; ".join(yours)
    console.print(table)
