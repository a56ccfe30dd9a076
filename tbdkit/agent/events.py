"""Progress events from the agent to the launcher: one JSON object per stdout line, prefixed
so that anything else a library prints on stdout is told apart (and goes to the log); the line
format is tbdkit.core.events, which the launchers read by."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

from tbdkit.core.events import PREFIX, line

__all__ = ["ENABLED", "PREFIX", "emit"]
ENABLED = True  # off in the workers of a data-parallel job other than rank 0: one progress stream


def emit(event: str, **fields: Any) -> None:
    if event in ("phase", "compile_done", "warmup_done", "done"):
        logging.getLogger("tbdkit.agent").info("%s %s", event, json.dumps(fields, default=str))
    if not ENABLED:
        return
    try:
        sys.stdout.write(line(event, **fields))
        sys.stdout.flush()
    except BrokenPipeError:
        # The launcher is gone (killed, or its terminal closed): nobody reads the progress any more.
        # The run goes on to its end or to the stop it was sent, and its results and log still say
        # what happened; stdout points at /dev/null so no later write (or exit's flush) fails.
        _stop_emitting()


def _stop_emitting() -> None:
    global ENABLED
    ENABLED = False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    logging.getLogger("tbdkit.agent").warning(
        "the launcher stopped reading progress (broken pipe): events go to this log only"
    )
