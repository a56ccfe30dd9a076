"""`tbdkit bench` (train a model on each framework and batch size) and `tbdkit list` (what can run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from tbdkit.analysis import cost
from tbdkit.bench.plan import Plan, parse_batches, plan, prepare
from tbdkit.bench.run_list import run_all
from tbdkit.cli import slurm
from tbdkit.cli.common import (
    CompileCacheOpt,
    CpusOpt,
    GraphOpt,
    OneProcessOpt,
    ParallelOpt,
    PinOpt,
    PrecisionOpt,
    PriceOpt,
    ResultsOpt,
    WarmupCapOpt,
    WorkloadsOpt,
    check_cpus,
    cost_table,
    use_workloads,
)
from tbdkit.cli.console import console, convergence_table, results_table, styled
from tbdkit.core.frameworks import KNOWN_FRAMEWORKS
from tbdkit.core.paths import default_results_dir
from tbdkit.env import stacks
from tbdkit.results import outputs
from tbdkit.results.summary import exit_code_of
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
    precision: PrecisionOpt = "fp32",
    graph: GraphOpt = "standard",
    compile_cache: CompileCacheOpt = "private",
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
        str, typer.Option(help="auto (netns for several nodes, else native) | native | docker | netns | slurm")
    ] = "auto",
    nodes: Annotated[int, typer.Option(help="machines of a data-parallel job (with --launcher netns here)")] = 1,
    gpus_per_node: Annotated[
        int, typer.Option(help="workers per machine (GPUs; processes on CPUs); batch is per worker")
    ] = 1,
    link_rate: Annotated[str | None, typer.Option(help="shape each node's link, e.g. 1gbit (--launcher netns)")] = None,
    one_process: OneProcessOpt = False,
    parallel: ParallelOpt = "ddp",
    data: Annotated[str, typer.Option(help="'synthetic' or the path of the real dataset")] = "synthetic",
    seed: Annotated[int, typer.Option(help="random seed (recorded in env.json)")] = 0,
    max_measure_s: Annotated[float | None, typer.Option(help="cap on the sample window, seconds")] = None,
    max_warmup_s: WarmupCapOpt = None,
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
    partition: slurm.PartitionOpt = None,
    account: slurm.AccountOpt = None,
    time_limit: slurm.TimeLimitOpt = None,
    sbatch: slurm.SbatchOpt = None,
    container_image: slurm.ContainerOpt = None,
    wait: slurm.WaitOpt = True,
    slurm_config: slurm.ConfigOpt = None,
    workloads: WorkloadsOpt = None,
) -> None:
    """Train MODEL on each framework and batch size, measuring throughput and utilization."""
    use_workloads(workloads)
    prices = cost.resolve(price_per_hour)  # a wrong price is said before anything runs
    slurm.configure(partition, account, time_limit, sbatch, container_image, wait, slurm_config)
    p = plan(model, framework, preset, device, launcher, nodes, data)
    hp = p.hp(variant)
    batches = parse_batches(batch) or [int(hp["default_batch"])]
    outputs.check_name(results, "--results")
    caps = {"max_measure_s": max_measure_s, "max_warmup_s": max_warmup_s, "target_ci": target_ci}
    fields: dict[str, Any] = {"precision": precision, "graph": graph, "variant": variant, "seed": seed}
    fields["compile_cache"] = compile_cache
    fields |= {"nodes": nodes, "gpus_per_node": gpus_per_node, "link_rate": link_rate, "one_process": one_process}
    fields["parallel"] = parallel
    fields |= {"memory_limit_mb": memory_limit_mb, "cpus": check_cpus(cpus), "pin": pin, "device": device}
    fields["measure"] = {k: v for k, v in caps.items() if v is not None}

    def make(fw: str, b: int) -> specs.RunSpec:
        return specs.build(
            model=model, framework=fw, batch_size=b, preset=p.preset, launcher=p.launcher, data=p.data, **fields
        )

    # Validate every spec of the grid before anything installs or runs.
    for fw in p.checked:
        for b in batches:
            make(fw, b)
    frameworks = prepare(p, device, setup, variant)
    run_specs = [make(fw, b) for fw in frameworks for b in batches]
    summaries = run_all(run_specs, results, p.model.throughput_unit, quiet_stdout=as_json, preflighted=True)
    _print(summaries, p, model, results, prices, as_json)
    # a disturbed run finished and kept its numbers (flagged, with reasons): not a failure; Ctrl-C is 130 even
    # where the run it reached had ended its window and kept what it measured
    raise typer.Exit(exit_code_of({s["status"] for s in summaries}, interrupted=summaries.interrupted))


def _print(summaries: list[dict[str, Any]], p: Plan, model: str, results: Path, prices: Any, as_json: bool) -> None:
    """The runs' summaries: as JSON, or the results table (with the cost table where prices were given)."""
    if as_json:
        print(json.dumps(summaries, indent=2))
        return
    table = convergence_table if p.preset == "converge" else results_table
    title = f"{p.model.info.get('title', model)} ({p.preset} preset) — results in {results}"
    console.print(table(summaries, title=title))
    if prices is not None and p.preset != "converge":
        console.print(cost_table(summaries, results, prices))


STACK_STATE = {
    "installed": "[green]installed[/]",
    "not installed": "[yellow]not installed[/]",
    "damaged": "[red]damaged[/]",
}


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
                cells.append(styled(STACK_STATE[stacks.state(fw)]))
        presets = ", ".join(f"{p} ({m.default_batch(p)})" for p in m.presets)
        table.add_row(m.name, m.info.get("application", ""), m.throughput_unit, *cells, presets)
    yours = [f"{m.name} ({m.origin}): {m.folder}" for m in catalog.models().values() if m.origin != catalog.KIT]
    if yours:
        table.caption = "not the kit's: " + "; ".join(yours)
    console.print(table)
    for fw in stacks.STACKS:
        try:
            stacks.marker(fw)
        except stacks.DamagedStack as exc:
            console.print(Text.assemble(("damaged: ", "red"), str(exc)), highlight=False)
