"""`tbdkit reference`: reference results on one NVIDIA GPU (`python -m tbdkit.bench.reference` is the same
command for a GPU machine's own Python, which may lack the kit's CLI libraries)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tbdkit.bench import reference as ref
from tbdkit.core.paths import KIT_ROOT
from tbdkit.report import reference_table


def reference(
    model: Annotated[
        list[str] | None, typer.Option("--model", "-m", help=f"repeatable; default: {', '.join(ref.MODELS)}")
    ] = None,
    suite: Annotated[bool, typer.Option("--suite", help="every model of the suite (PyTorch)")] = False,
    results: Annotated[Path, typer.Option("--results", "-r", help="where the runs are written")] = Path(
        "results/reference"
    ),
    precision: Annotated[str, typer.Option(help="fp32 | tf32 | amp")] = "fp32",
    max_measure_s: Annotated[float, typer.Option(help="cap on each sample window, seconds")] = 30.0,
    max_warmup_s: Annotated[float, typer.Option(help="cap on each warm-up, seconds")] = 30.0,
    profile_iterations: Annotated[int, typer.Option(help="iterations the Nsight Compute pass covers")] = 3,
    launch_count: Annotated[
        int, typer.Option(help="launches ncu profiles of each kernel and launch configuration")
    ] = 3,
    ncu: Annotated[bool, typer.Option("--ncu/--no-ncu", help="add the Nsight Compute pass")] = True,
    batch: Annotated[
        list[int] | None, typer.Option("--batch", "-b", help="batch size (repeatable); default: each model's two")
    ] = None,
    ncu_warmup_s: Annotated[float, typer.Option(help="cap on the Nsight Compute pass's warm-up, seconds")] = (
        ref.NCU_WARMUP_S
    ),
    ncu_timeout_s: Annotated[float, typer.Option(help="the whole Nsight Compute pass at most, seconds")] = (
        ref.NCU_TIMEOUT_S
    ),
    run: Annotated[
        Path | None,
        typer.Option(
            "--run",
            help="profile this finished run folder in place (ok or disturbed; the ncu pass only, nothing copied)",
        ),
    ] = None,
    table: Annotated[
        bool, typer.Option("--table", help="print the committed reference results as a Markdown table; run nothing")
    ] = False,
    readme: Annotated[bool, typer.Option("--readme", help="with --table: also write it into README.md")] = False,
) -> None:
    """Reference results on one NVIDIA GPU: measured runs plus an Nsight Compute pass, copied into workloads/<model>/reference/."""
    if table:
        print(reference_table.table(KIT_ROOT, readme))
        return
    if run is not None:
        extra = ref.profile_run(run, profile_iterations, launch_count, ncu_warmup_s, ncu_timeout_s)
        for name, m in extra.items():
            shown = m["value"] if m["value"] is not None else f"null ({m['reason']})"
            print(f"{name}: {shown}" + (f"; {m['note']}" if m.get("note") else ""))
        return
    models = ref.suite() if suite else model or list(ref.MODELS)
    ref.check_models(models)
    ref.reference(
        models,
        results,
        precision,
        max_measure_s,
        max_warmup_s,
        profile_iterations,
        launch_count,
        ncu,
        batch,
        ncu_warmup_s,
        ncu_timeout_s,
    )
