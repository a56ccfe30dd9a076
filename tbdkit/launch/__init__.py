"""Launchers: start the agent for a RunSpec where its framework lives, and finish the run
directory if the agent could not. Each launcher implements tbdkit.launch.base.Launcher and is one
row of LAUNCHERS, under the name a spec gives it (tbdkit.spec.launchers: what each one can run)."""

from __future__ import annotations

from pathlib import Path

from tbdkit.core.errors import UserError
from tbdkit.launch.base import EventHandler, Launcher
from tbdkit.launch.docker import DockerLauncher
from tbdkit.launch.native import NativeLauncher
from tbdkit.launch.netns import NetnsLauncher
from tbdkit.launch.outcome import Outcome, finalize, new_run_dir
from tbdkit.launch.slurm import SlurmLauncher
from tbdkit.results import files as runfiles
from tbdkit.results import summary as summaries
from tbdkit.results.index import Index
from tbdkit.results.rundir import RunDir
from tbdkit.spec import launchers
from tbdkit.spec.run_spec import RunSpec

LAUNCHERS: dict[str, Launcher] = {
    "native": NativeLauncher(),
    "docker": DockerLauncher(),
    "netns": NetnsLauncher(),
    "slurm": SlurmLauncher(),
}


def get(name: str, nodes: int = 1) -> Launcher:
    """The launcher `--launcher name` means (`auto` by tbdkit.spec.launchers.resolve)."""
    resolved = launchers.resolve(name, nodes)
    if resolved not in LAUNCHERS:
        raise UserError(f"Unknown launcher '{name}': choose {launchers.AUTO}, {', '.join(LAUNCHERS)}.")
    return LAUNCHERS[resolved]


def start(spec: RunSpec, run_dir: Path, on_event: EventHandler, launcher: Launcher | None = None) -> int:
    """Write the spec into an existing run folder and run the agent there; the agent's exit code.
    (`launch` below does this for a new run folder and finishes its summary.)"""
    try:
        RunDir(run_dir).write_json(runfiles.SPEC, spec.recorded().model_dump())
    except OSError as exc:
        raise UserError(
            f"The run folder {run_dir} cannot be written ({exc.strerror or exc}): free some space "
            "or pass another --results."
        ) from None
    return (launcher or LAUNCHERS[spec.launcher]).run(spec, run_dir, on_event)


def launch(
    spec: RunSpec,
    results: Path,
    on_event: EventHandler,
    launcher: Launcher | None = None,
    preflight: bool = True,
    index: Index | None = None,
) -> Outcome:
    """Run one spec to completion (or failure) in a new run folder and return what its summary says;
    `launcher` replaces the spec's own (e.g. a native launcher with another Python). `preflight`: unless the
    caller ran it (tbdkit.bench.runner, once per framework). `index`: where a job's single-worker baseline is
    found (its scaling efficiency, see conclude)."""
    from tbdkit.results.space import check_results_folder

    check_results_folder(results, spec)  # a read-only, full or mistaken results path fails before training
    chosen = launcher or LAUNCHERS[spec.launcher]
    if preflight:
        chosen.preflight(spec.framework, spec.device)  # what can be checked fails before a run folder exists
    run_dir = new_run_dir(results, spec)
    on_event({"event": "run_dir", "run_dir": str(run_dir)})  # a sweep records it before the run goes on
    exit_code = start(spec, run_dir, on_event, chosen)
    return conclude(spec, run_dir, exit_code, on_event, chosen, index)


def conclude(
    spec: RunSpec,
    run_dir: Path,
    exit_code: int,
    on_event: EventHandler,
    chosen: Launcher,
    index: Index | None = None,
) -> Outcome:
    """After the agent (or the job) ended: its run folder's summary finished, the failed worker named,
    what only the launcher knows, then a job's scaling efficiency against the single-worker runs of `index`
    (tbdkit.analysis.scaling), all through the results layer's one writer (tbdkit.results.summary.record)."""
    by_agent = RunDir(run_dir).summary.is_file()
    status, summary = finalize(run_dir, spec, exit_code, on_event)
    if spec.processes > 1:
        from tbdkit.launch.workers import name_failed_workers

        status, summary = name_failed_workers(run_dir, spec, exit_code, summary)
    summary = chosen.finish(spec, run_dir, exit_code, summary, by_agent)  # what only the launcher knows
    if index is not None and spec.world_size > 1:
        from tbdkit.analysis.scaling import scaling_efficiency

        efficiency = scaling_efficiency(summary, index.runs(model=spec.model))
        if efficiency is not None:
            summary = summaries.record(run_dir, summary, metrics={"scaling_efficiency": efficiency})
    return Outcome(run_dir, summary.get("status", status), summary)
