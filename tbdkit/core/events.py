"""The event-line protocol between the agent and its launcher, the one thing both sides of that
process boundary share: a progress event is one JSON object on one stdout line after PREFIX, so
anything else a library prints on stdout is told apart (and goes to the log). The agent writes the
lines (tbdkit.agent.events), the launchers read them (tbdkit.launch.base)."""

from __future__ import annotations

import json
from typing import Any

PREFIX = "@@tbdkit "


def line(event: str, **fields: Any) -> str:
    """The stdout line that carries `event` with its fields."""
    return PREFIX + json.dumps({"event": event, **fields}, default=str) + "\n"


def parse(text: str) -> dict[str, Any] | None:
    """The event a stdout line carries, or None for any other line."""
    if not text.startswith(PREFIX):
        return None
    try:
        event = json.loads(text[len(PREFIX) :])
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None
