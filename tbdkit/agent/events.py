"""Progress events from the agent to the launcher: one JSON object per stdout line, prefixed
so that anything else a library prints on stdout is told apart (and goes to the log)."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

PREFIX = "@@tbdkit "


def emit(event: str, **fields: Any) -> None:
    if event in ("phase", "warmup_done", "done"):
        logging.getLogger("tbdkit.agent").info("%s %s", event, json.dumps(fields, default=str))
    sys.stdout.write(PREFIX + json.dumps({"event": event, **fields}, default=str) + "\n")
    sys.stdout.flush()


def parse(line: str) -> dict[str, Any] | None:
    if not line.startswith(PREFIX):
        return None
    try:
        return json.loads(line[len(PREFIX):])
    except json.JSONDecodeError:
        return None
