"""The native launcher: the agent runs in the framework stack's own virtual environment."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tbdkit import stacks
from tbdkit.launch import EventHandler, stream
from tbdkit.spec import RunSpec


def command(spec: RunSpec, run_dir: Path) -> list[str]:
    python = stacks.require(spec.framework)
    return [str(python), "-u", "-m", "tbdkit.agent", "--spec", str(run_dir / "spec.json"),
            "--run-dir", str(run_dir)]


def run(spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int:
    """Start the agent in its own session (so a terminal's Ctrl-C reaches only us) and pass each
    Ctrl-C on to it: the first stops it at the next iteration, a second stops it at once."""
    cmd = command(spec, run_dir)
    with (run_dir / "log.txt").open("a", buffering=1) as log:
        log.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1,
                                start_new_session=True, env=stacks.agent_env())
        return stream(proc, log, on_event, lambda: proc.send_signal(signal.SIGINT))
