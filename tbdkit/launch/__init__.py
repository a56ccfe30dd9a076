"""Launchers: start the agent for a RunSpec where its framework lives, and finish the run
directory if the agent could not."""

from __future__ import annotations

import datetime as dt
import secrets
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

from tbdkit.agent import events, sink
from tbdkit.spec import RunSpec

EventHandler = Callable[[dict[str, Any]], None]


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
        path = results / f"{stamp}-{spec.model}-{spec.framework}-b{spec.batch_size}-{spec.precision}-{suffix}"
        try:
            path.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{RUN_DIR_ATTEMPTS} new run directory names in {results} were all taken")


def stream(proc: subprocess.Popen[str], log: IO[str], on_event: EventHandler, interrupt: Callable[[], None]) -> int:
    """Pass the agent's events to `on_event` and its other stdout lines to the log until it
    exits; each Ctrl-C calls `interrupt` (the agent stops at the next iteration, or at once on
    a second) and the stream goes on."""
    assert proc.stdout is not None
    while True:
        try:
            for line in proc.stdout:
                event = events.parse(line)
                if event is None:
                    log.write(line)
                else:
                    on_event(event)
            return proc.wait()
        except KeyboardInterrupt:
            if proc.poll() is None:
                interrupt()
            on_event({"event": "interrupt"})


def launch(spec: RunSpec, results: Path, on_event: EventHandler) -> Outcome:
    """Run one spec to completion (or failure) and return what its summary says."""
    if spec.launcher == "docker":
        from tbdkit.launch import docker

        return docker.launch(spec, results, on_event)
    from tbdkit.launch import native, netns

    run_dir = new_run_dir(results, spec)
    sink.write_json(run_dir / "spec.json", spec.model_dump())
    exit_code = (netns.run if spec.launcher == "netns" else native.run)(spec, run_dir, on_event)
    status, summary = finalize(run_dir, spec, exit_code)
    if spec.world_size > 1:
        from tbdkit.launch.workers import name_failed_workers

        status, summary = name_failed_workers(run_dir, spec, exit_code, summary)
    return Outcome(run_dir, status, summary)


def finalize(run_dir: Path, spec: RunSpec, exit_code: int) -> tuple[str, dict[str, Any]]:
    """The agent writes summary.json last; if it died before that, say so in one."""
    path = run_dir / "summary.json"
    if path.is_file():
        summary = sink.read_json(path)
        return summary["status"], summary
    status, error = "failed", f"the agent exited with code {exit_code} before writing its results; see log.txt"
    if spec.memory_limit_mb and exit_code < 0:
        # Under the address-space cap, native code whose allocation fails (an OpenMP thread's stack,
        # a kernel's scratch buffer) often dies by a signal instead of raising: the cap ran out.
        sig = signal.Signals(-exit_code).name if -exit_code in signal.valid_signals() else str(-exit_code)
        status, error = "oom", (f"out of memory (the agent died by {sig} under --memory-limit-mb "
                                f"{spec.memory_limit_mb}: native code that cannot allocate crashes rather than "
                                "raising); see log.txt")
    summary = {
        "run_id": run_dir.name, "status": status, "error": error,
        "model": spec.model, "framework": spec.framework, "batch_size": spec.batch_size,
        "precision": spec.precision, "preset": spec.preset, "data": spec.data, "seed": spec.seed,
        "exit_code": exit_code,
    }
    sink.write_json(path, summary)
    return status, summary
