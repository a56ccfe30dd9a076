"""Launchers: start the agent for a RunSpec where its framework lives, and finish the run
directory if the agent could not. Each launcher implements tbdkit.launch.base.Launcher."""

from __future__ import annotations

from pathlib import Path

from tbdkit.core.errors import UserError
from tbdkit.launch.base import EventHandler, Launcher
from tbdkit.launch.outcome import Outcome, finalize, new_run_dir
from tbdkit.results import files as runfiles
from tbdkit.results.rundir import RunDir
from tbdkit.spec.run_spec import RunSpec


def launch(spec: RunSpec, results: Path, on_event: EventHandler) -> Outcome:
    """Run one spec to completion (or failure) and return what its summary says."""
    from tbdkit.results.space import check_results_folder

    check_results_folder(results, spec)  # a read-only, full or mistaken results path fails before training
    if spec.launcher == "docker":
        from tbdkit.launch import docker

        return docker.launch(spec, results, on_event)
    from tbdkit.launch import native, netns

    run_dir = new_run_dir(results, spec)
    on_event({"event": "run_dir", "run_dir": str(run_dir)})  # a sweep records it before the run goes on
    try:
        RunDir(run_dir).write_json(runfiles.SPEC, spec.model_dump())
    except OSError as exc:
        raise UserError(
            f"The run folder {run_dir} cannot be written ({exc.strerror or exc}): free some space "
            "or pass another --results."
        ) from None
    launcher: Launcher = netns if spec.launcher == "netns" else native
    exit_code = launcher.run(spec, run_dir, on_event)
    status, summary = finalize(run_dir, spec, exit_code, on_event)
    if spec.processes > 1:
        from tbdkit.launch.workers import name_failed_workers

        status, summary = name_failed_workers(run_dir, spec, exit_code, summary)
    return Outcome(run_dir, status, summary)
