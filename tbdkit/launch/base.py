"""The one launcher interface. A launcher says which frameworks it can run here and checks, before any
run folder exists, that one of them can run (preflight); it starts the agent (`python -m tbdkit.agent`)
for a spec whose run folder holds spec.json, passes the agent's progress events on, and returns the
agent's exit code; the run folder's summary is finished by `tbdkit.launch.outcome.finalize`, the same
for all, and then by the launcher's own `finish` (the docker launcher adds the container's record).
The launchers are one table (tbdkit.launch.LAUNCHERS), whose names are those of tbdkit.spec.launchers.

The launcher reaches the agent only as a process: the agent's stdout lines that start with
EVENT_PREFIX are its events (the line format both sides share is tbdkit.core.events), every other line
goes to the log."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any, Protocol

from tbdkit.core.events import PREFIX as EVENT_PREFIX
from tbdkit.core.events import parse as parse_event
from tbdkit.spec import catalog
from tbdkit.spec.run_spec import RunSpec

__all__ = ["EVENT_PREFIX", "Busy", "EventHandler", "Launcher", "parse_event", "quiet", "stream"]

EventHandler = Callable[[dict[str, Any]], None]
# Shows a long step (e.g. "setting up the PyTorch stack in .venvs/pytorch") while it runs: the caller's display.
Busy = Callable[[str], AbstractContextManager[object]]


def quiet(text: str) -> AbstractContextManager[object]:
    """A Busy that shows nothing."""
    return contextlib.nullcontext()


class Launcher(Protocol):
    """One way of starting the agent: native (the stack's virtual environment), netns (several nodes as
    network namespaces of this machine), docker (the stack's image)."""

    name: str

    def frameworks(self, model: catalog.Model, requested: list[str], setup: bool) -> list[str]:
        """The frameworks of `model` to run: those requested ('all' expanded), else the default ones this
        launcher can run here; a UserError when there is none (`setup`: one may still be set up)."""
        ...

    def framework_gpus(self, framework: str) -> tuple[int | None, str | None]:
        """(GPUs the framework sees, why none); None where it cannot be asked before the run."""
        ...

    def preflight(self, framework: str, device: str, setup: bool = False, busy: Busy = quiet) -> None:
        """Everything the run needs that can be checked before it starts, each a UserError naming the fix;
        with `setup`, what is missing and can be installed is installed first (shown through `busy`)."""
        ...

    def run(self, spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int:
        """Run the agent for the spec whose run folder holds spec.json; return its exit code."""
        ...

    def finish(
        self, spec: RunSpec, run_dir: Path, exit_code: int, summary: dict[str, Any], by_agent: bool
    ) -> dict[str, Any]:
        """After finalize: the summary with what only this launcher knows (`by_agent`: the agent wrote it)."""
        ...


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
