"""What bench, sweep and the planner tell the user while they work, as an interface: the command line
implements it with live progress bars (tbdkit.cli.console) and installs it with `use`; without it (a
script calling tbdkit.bench directly) the messages are plain lines on stderr. Nothing in tbdkit.bench
prints with Rich itself."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol

from tbdkit.launch.base import EventHandler

Level = Literal["info", "warning", "error"]


class Bar(Protocol):
    """A bar of work counted in units (a sweep's points)."""

    def update(self, *, advance: int = 0, phase: str | None = None, note: str | None = None) -> None: ...


class Notifier(Protocol):
    def say(self, text: str, level: Level = "info") -> None:
        """One line for the user: `warning` and `error` stand out."""
        ...

    def busy(self, text: str) -> AbstractContextManager[object]:
        """Shown while a long step runs (setting up a stack)."""
        ...

    def run(self, label: str, unit: str) -> EventHandler:
        """The handler of one run's agent events (phase, progress, warm-up, done), shown under `label`."""
        ...

    def bar(self, description: str, total: int, completed: int) -> Bar:
        """A bar over `total` units of work, `completed` of them done already."""
        ...


# quiet_stdout (stdout carries JSON: show everything on stderr), eta (the bars show the time left) -> a display
Display = Callable[[bool, bool], AbstractContextManager[Notifier]]


class _NoBar:
    def update(self, *, advance: int = 0, phase: str | None = None, note: str | None = None) -> None:
        return None


class Plain:
    """Plain lines on stderr: messages and each run's phases, no bars."""

    def say(self, text: str, level: Level = "info") -> None:
        print(text if level == "info" else f"{level}: {text}", file=sys.stderr, flush=True)

    def busy(self, text: str) -> AbstractContextManager[object]:
        self.say(text)
        return contextlib.nullcontext()

    def run(self, label: str, unit: str) -> EventHandler:
        def handler(event: dict[str, Any]) -> None:
            if event.get("event") == "phase":
                self.say(f"  {label}: {event['phase']}")
            elif event.get("event") == "warning":
                self.say(f"  {label}: {event.get('message')}", "warning")
            elif event.get("event") == "done":
                self.say(f"  {label}: {event['status']}")

        return handler

    def bar(self, description: str, total: int, completed: int) -> Bar:
        return _NoBar()


@contextlib.contextmanager
def _plain(quiet_stdout: bool = False, eta: bool = False) -> Iterator[Notifier]:
    yield Plain()


_display: Display = _plain


def use(display: Display) -> None:
    """Install the user's display (the command line does, once)."""
    global _display
    _display = display


def live(quiet_stdout: bool = False, eta: bool = False) -> AbstractContextManager[Notifier]:
    """The installed display for a stretch of work (plain lines on stderr when none is installed)."""
    return _display(quiet_stdout, eta)
