"""The one launcher interface. A launcher starts the agent (`python -m tbdkit.agent`) for a spec
whose run folder holds spec.json, passes the agent's progress events on, and returns the agent's
exit code; the run folder's summary is finished by `tbdkit.launch.outcome.finalize`, the same for all.

The launcher reaches the agent only as a process: the agent's stdout lines that start with
EVENT_PREFIX are its events (the line format both sides share is tbdkit.core.events), every other line
goes to the log."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from tbdkit.core.events import PREFIX as EVENT_PREFIX
from tbdkit.core.events import parse as parse_event
from tbdkit.spec.run_spec import RunSpec

__all__ = ["EVENT_PREFIX", "EventHandler", "Launcher", "parse_event", "stream"]

EventHandler = Callable[[dict[str, Any]], None]


class Launcher(Protocol):
    """native, netns (modules) and docker (DockerLauncher, which holds the image it checked)."""

    def run(self, spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int: ...


def stream(proc: subprocess.Popen[str], log: IO[str], on_event: EventHandler, interrupt: Callable[[], None]) -> int:
    """Pass the agent's events to `on_event` and its other stdout lines to the log until it
    exits; each Ctrl-C calls `interrupt` (the agent stops at the next iteration, or at once on
    a second) and the stream goes on."""
    assert proc.stdout is not None
    while True:
        try:
            for line in proc.stdout:
                event = parse_event(line)
                if event is None:
                    log.write(line)
                else:
                    on_event(event)
            return proc.wait()
        except KeyboardInterrupt:
            if proc.poll() is None:
                interrupt()
            on_event({"event": "interrupt"})
