"""`tbdkit render`: the launch files of a data-parallel job, for inspection or submission."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tbdkit.cli.common import ParallelOpt, WorkloadsOpt, use_workloads
from tbdkit.cli.console import console
from tbdkit.core.errors import UserError
from tbdkit.launch.render import TARGETS, write
from tbdkit.results import files as runfiles
from tbdkit.results import outputs
from tbdkit.spec import catalog, launchers
from tbdkit.spec import run_spec as specs

# Names that look like a launch file rather than the folder -o takes.
FILE_SUFFIXES = (".sbatch", ".sh", ".yaml", ".yml")


def render(
    target: Annotated[str, typer.Option(help="torchrun | slurm | k8s | compose")],
    model: Annotated[str, typer.Option("--model", "-m")] = "resnet50",
    framework: Annotated[str, typer.Option("--framework", "-f")] = "pytorch",
    batch: Annotated[int | None, typer.Option("--batch", "-b", help="per-worker batch (default: the preset's)")] = None,
    precision: Annotated[str, typer.Option(help="fp32 | tf32 | amp | bf16")] = "fp32",
    graph: Annotated[
        str, typer.Option(help="standard (the paper's) | compiled (torch.compile, XLA, MXNet static shapes)")
    ] = "standard",
    preset: Annotated[str, typer.Option(help="smoke | paper")] = "paper",
    nodes: Annotated[int, typer.Option(help="machines")] = 2,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs (workers) per machine")] = 1,
    parallel: ParallelOpt = "ddp",
    image: Annotated[
        str | None,
        typer.Option(
            help="container image (default: the kit's image of the stack); for slurm, the job runs it through "
            "pyxis/enroot, and without it runs the stack's venv from a path the nodes share"
        ),
    ] = None,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="a folder (made if missing) for the launch file and the "
            "spec.json it reads; the file's name is the target's",
        ),
    ] = Path("render"),
    workloads: WorkloadsOpt = None,
) -> None:
    """Write TARGET's launch file for MODEL on NODES x GPUS_PER_NODE workers (and the spec.json it runs)."""
    use_workloads(workloads)
    if target not in TARGETS:
        raise UserError(f"Unknown render target '{target}': choose one of {', '.join(TARGETS)}.")
    if out.is_file() or (not out.is_dir() and out.suffix.lower() in FILE_SUFFIXES):
        raise UserError(
            f"-o takes a folder, not a file ('{out}'): pass a folder, e.g. -o {out.parent / out.stem}, "
            f"and the launch file is written in it as {TARGETS[target]}."
        )
    outputs.check_folder(out, "-o")
    hp = catalog.get(model).hp(preset)
    # Validated as a job on real machines; spec.json records the target (rendered_for) and, for Slurm, the launcher.
    run_spec = specs.build(
        model=model,
        framework=framework,
        batch_size=int(hp["default_batch"]) if batch is None else batch,  # 0 is refused, never the default
        precision=precision,
        graph=graph,
        preset=preset,
        device="auto",
        launcher=target if target in launchers.TRAITS else launchers.resolve(launchers.AUTO, nodes),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        parallel=parallel,
    )
    path = write(run_spec, target, out, image=image, native=image is None)
    console.print(
        f"wrote {path} and {out / runfiles.SPEC} ({nodes} node(s) x {gpus_per_node} worker(s), "
        f"per-worker batch {run_spec.batch_size})",
        highlight=False,
    )
