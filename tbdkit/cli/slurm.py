"""The flags of `tbdkit bench --launcher slurm` (each also a key of slurm.toml, tbdkit.launch.slurm.SlurmOptions)
and `tbdkit gather JOBID`, which finishes a job submitted with --no-wait."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tbdkit import launch
from tbdkit.bench import run_list
from tbdkit.cli.common import ResultsOpt
from tbdkit.cli.console import console, results_table
from tbdkit.core.paths import default_results_dir
from tbdkit.launch.slurm import SlurmLauncher
from tbdkit.results.summary import exit_code_of

PartitionOpt = Annotated[str | None, typer.Option(help="Slurm: the partition (slurm.toml's partition)")]
AccountOpt = Annotated[str | None, typer.Option(help="Slurm: the account to charge (slurm.toml's account)")]
TimeLimitOpt = Annotated[
    str | None, typer.Option("--time-limit", help="Slurm: the job's time limit, e.g. 00:30:00 (slurm.toml's time)")
]
SbatchOpt = Annotated[
    list[str] | None, typer.Option("--sbatch", help="Slurm: one more sbatch option, e.g. --sbatch=--qos=high")
]
ContainerOpt = Annotated[
    str | None,
    typer.Option(
        help="Slurm: run the framework image through pyxis/enroot instead of the shared stack (untested here)"
    ),
]
WaitOpt = Annotated[
    bool, typer.Option("--wait/--no-wait", help="Slurm: follow the job to its end, or submit and return")
]
ConfigOpt = Annotated[Path | None, typer.Option("--slurm-config", help="Slurm settings file (default: ./slurm.toml)")]


def configure(
    partition: str | None,
    account: str | None,
    time_limit: str | None,
    sbatch: list[str] | None,
    container_image: str | None,
    wait: bool,
    config: Path | None,
) -> None:
    """The Slurm launcher's settings: the config file, then the flags given (read when a job is rendered)."""
    chosen = launch.LAUNCHERS["slurm"]
    assert isinstance(chosen, SlurmLauncher)
    chosen.configure(
        config,
        partition=partition,
        account=account,
        time=time_limit,
        options=tuple(sbatch or ()),
        container_image=container_image,
        wait=None if wait else False,
    )


def gather(
    job_id: Annotated[str, typer.Argument(help="the Slurm job id `tbdkit bench --launcher slurm --no-wait` printed")],
    results: ResultsOpt = default_results_dir(),
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Follow a Slurm job submitted with --no-wait to its end, finish its run folder and index it."""
    summary = run_list.gather(job_id, results, quiet_stdout=as_json)
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        console.print(results_table([summary], title=f"Slurm job {job_id} — results in {results}"))
    raise typer.Exit(exit_code_of([str(summary.get("status"))]))
