"""What every launcher shares around the agent's process: a new run folder for a spec, and the
run's outcome, its summary finished here when the agent could not write one (the same for all)."""

from __future__ import annotations

import datetime as dt
import secrets
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tbdkit.core.errors import UserError
from tbdkit.launch.base import EventHandler
from tbdkit.results import files as runfiles
from tbdkit.results import oom
from tbdkit.results import summary as summaries
from tbdkit.results.rundir import RunDir
from tbdkit.results.summary import Status
from tbdkit.spec import run_spec as specs
from tbdkit.spec.run_spec import RunSpec


@dataclass(frozen=True)
class Outcome:
    run_dir: Path
    status: str
    summary: dict[str, Any]

    @property
    def run_id(self) -> str:
        return self.run_dir.name


RUN_ID_RANDOM_BYTES = 4  # 32 random bits after the second's time stamp
RUN_DIR_ATTEMPTS = 8


def new_run_dir(results: Path, spec: RunSpec) -> Path:
    """A new, empty run directory; a name already taken (two runs in the same second drew the
    same suffix) is retried with a fresh suffix, never reused."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    for _ in range(RUN_DIR_ATTEMPTS):
        suffix = secrets.token_hex(RUN_ID_RANDOM_BYTES)
        graph = "" if spec.graph == "standard" else f"-{spec.graph}"  # standard runs keep the ids they had
        path = results / f"{stamp}-{spec.model}-{spec.framework}-b{spec.batch_size}-{spec.precision}{graph}-{suffix}"
        try:
            path.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{RUN_DIR_ATTEMPTS} new run directory names in {results} were all taken")


def signal_name(exit_code: int) -> str:
    """The signal that killed a process whose exit code (as Popen returns it) is negative: 'SIGKILL'."""
    return signal.Signals(-exit_code).name if -exit_code in signal.valid_signals() else f"signal {-exit_code}"


def ended_by(exit_code: int) -> str:
    """How a process ended, in words: 'was killed by SIGKILL' for -9, 'exited with code 3' for 3."""
    return f"was killed by {signal_name(exit_code)}" if exit_code < 0 else f"exited with code {exit_code}"


def shell_status(status: int) -> int:
    """An exit status as a shell or srun reports it, as Popen returns one: 128 + N, a process killed by signal N,
    is -N; any other status is itself."""
    killed = status - 128
    return -killed if killed in signal.valid_signals() else status


def _measured_rows(run_dir: Path) -> int:
    """How many iteration rows the agent appended to iterations.csv before it died."""
    try:
        with RunDir(run_dir).iterations.open(errors="replace") as f:
            return max(0, sum(1 for line in f if line.strip()) - 1)
    except OSError:
        return 0


def _clear_unfinished(run_dir: Path) -> str:
    """Remove the temporary files of the writes the run's killed processes had begun (in the run folder and its
    workers' folders); what they were to become, as words for the summary's error ('' when none). Only once
    every process of the run has ended: a live writer's temporary file looks the same."""
    from tbdkit.core import atomic

    folders = [run_dir, *(p for p in RunDir(run_dir).workers.glob("rank*") if not p.is_symlink())]
    removed = set()
    for folder in folders:
        for tmp, name in atomic.unfinished(folder).items():
            try:
                tmp.unlink(missing_ok=True)
            except OSError:  # read-only storage: the half file stays, and is not said to be removed
                continue
            removed.add((folder / name).relative_to(run_dir).as_posix())
    names = sorted(removed)
    if len(names) > 1:
        return f"; its unfinished writes of {', '.join(names)} were removed"
    return f"; its unfinished write of {names[0]} was removed" if names else ""


def _agents_summary(run_dir: Path) -> tuple[dict[str, Any] | None, Path | None]:
    """The summary the agent wrote: in the run folder, or where it fell back to (a full disk)."""
    rd = RunDir(run_dir)
    for path in (rd.summary, rd.fallback(runfiles.SUMMARY)):
        if path.is_file():
            try:
                return summaries.read(path.parent), path
            except (OSError, summaries.Unreadable):
                continue
    return None, None


def _keep(run_dir: Path, summary: dict[str, Any], on_event: EventHandler | None) -> None:
    """Write the summary in the run folder; where the disk refuses, in the system temp folder, and say where."""
    rd = RunDir(run_dir)
    try:
        where = summaries.write(run_dir, summary)
    except OSError as exc:
        where, why = None, exc.strerror or str(exc)
    if where == rd.summary:
        return
    message = (
        f"the results disk refused summary.json; the run's summary is kept at {where}"
        if where
        else f"summary.json could not be written anywhere ({why}); the run's summary is: {summary}"
    )
    if on_event is not None:
        on_event({"event": "warning", "message": message})


def _finish_agents(
    run_dir: Path, spec: RunSpec, on_event: EventHandler | None, cleared: str = ""
) -> dict[str, Any] | None:
    """The summary the agent wrote, kept in the run folder (where its disk was full: tried again, else said where
    it is), with `cleared` (the unfinished writes removed) added to a failed run's error, and mllog.txt beside
    it; None when the agent wrote none."""
    summary, found = _agents_summary(run_dir)
    if summary is None or found is None:
        return None
    said = bool(cleared) and summary.get("status") not in summaries.MEASURED
    if said:
        summary = {**summary, "error": f"{summary.get('error') or 'the run failed'}{cleared}"}
    if said or found != RunDir(run_dir).summary:
        _keep(run_dir, summary, on_event)
    _write_mllog(run_dir, spec, summary, on_event)
    return summary


def finalize(
    run_dir: Path, spec: RunSpec, exit_code: int, on_event: EventHandler | None = None, ended: bool = True
) -> tuple[str, dict[str, Any]]:
    """The agent writes summary.json last; if it died before that, say so in one. `ended`: every process of
    the run has ended, on every node (the kit's launchers, which return when the run or job has; a rendered
    job's node 0 may finish while another node's agents still write), so the temporary files of writes that
    killed processes had begun are removed and named in a failed run's error."""
    cleared = _clear_unfinished(run_dir) if ended else ""
    summary = _finish_agents(run_dir, spec, on_event, cleared)
    if summary is not None:
        return summary["status"], summary
    status, error = (
        Status.FAILED.value,
        f"the agent exited with code {exit_code} before writing its results{cleared}; see log.txt",
    )
    extra: dict[str, Any] = {}
    if exit_code < 0:  # killed by a signal: whatever it measured before is kept in iterations.csv
        rows = _measured_rows(run_dir)
        extra["signal"] = signal_name(exit_code)
        error = (
            f"the agent was killed by {extra['signal']} before writing its results; iterations.csv keeps "
            f"the {rows} iteration(s) it measured{cleared}; see log.txt"
        )
    oom_error = oom.of_signal(extra.get("signal"), spec.memory_limit_mb)
    if oom_error:
        status, error = Status.OOM.value, oom_error
    summary = summaries.start(run_dir.name, spec, status, error, exit_code=exit_code, **extra)
    _keep(run_dir, summary, on_event)
    _write_mllog(run_dir, spec, summary, on_event)
    return status, summary


def finish_stopped(run_dir: Path, why: str) -> dict[str, Any] | None:
    """A run folder whose launcher was killed from outside (a deadline's SIGKILL after its SIGINT's grace),
    finished as its launcher would have: the temporary files of the writes its killed processes had begun
    removed, the agent's summary kept, or, where the agent wrote none, an `interrupted` one saying `why`, how
    many iterations iterations.csv keeps and which writes were removed; then mllog.txt. Returns the
    summary; None for a folder without a readable spec.json (nothing was launched into it)."""
    try:
        spec = specs.load(RunDir(run_dir).spec)
    except (OSError, ValueError, UserError):
        return None
    cleared = _clear_unfinished(run_dir)  # every process of the run was killed before this is called
    summary = _finish_agents(run_dir, spec, None, cleared)
    if summary is None:
        error = f"{why}; iterations.csv keeps the {_measured_rows(run_dir)} iteration(s) it measured{cleared}"
        summary = summaries.start(run_dir.name, spec, Status.INTERRUPTED.value, error)
        _keep(run_dir, summary, None)
        _write_mllog(run_dir, spec, summary, None)
    return summary


def _write_mllog(run_dir: Path, spec: RunSpec, summary: dict[str, Any], on_event: EventHandler | None) -> None:
    """mllog.txt beside the summary (MLPerf-style lines, tbdkit.results.mllog); a log that cannot be made is
    a warning, never a reason to lose the run."""
    try:
        from tbdkit.results import mllog, readers

        # the spec as the run recorded it (spec.json: its resolved hyperparameters among it)
        recorded = readers.json_object(RunDir(run_dir).spec) or spec.model_dump()
        mllog.write(run_dir, summary, recorded)
    except ImportError as exc:  # the kit's environment lacks mlperf-logging (`pip install -e .` adds it)
        message = f"mllog.txt not written: {exc}"
    except OSError as exc:
        if not RunDir(run_dir).summary.is_file():
            return  # the disk refused the summary too: the user was told where it is kept, once
        message = f"mllog.txt not written: {exc.strerror or exc}"
    except Exception as exc:
        message = f"mllog.txt not written: {type(exc).__name__}: {exc}"
    else:
        return
    if on_event is not None:
        on_event({"event": "warning", "message": message})
