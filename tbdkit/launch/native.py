"""The native launcher: the agent runs in the framework stack's own virtual environment."""

from __future__ import annotations

import ctypes
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Callable

from tbdkit import stacks
from tbdkit.launch.base import EventHandler, stream
from tbdkit.spec import RunSpec


def command(spec: RunSpec, run_dir: Path) -> list[str]:
    python = stacks.require(spec.framework)
    agent = ["-m", "tbdkit.agent", "--spec", str(run_dir / "spec.json"), "--run-dir", str(run_dir)]
    if spec.world_size > 1:  # several workers on this machine: torchrun starts them
        return [str(python), "-u", "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                f"--nproc-per-node={spec.gpus_per_node}", *agent]
    return [str(python), "-u", *agent]


def _libc_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()  # looked up here: the child between fork and exec must not import


def _stop_with_parent() -> None:
    """In the agent, before exec: SIGTERM it (a clean stop, marked interrupted) if the launcher
    dies, so a killed `tbdkit bench` or sweep leaves no orphan run going on (Linux prctl)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run(spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int:
    """Start the agent in its own session (so a terminal's Ctrl-C reaches only us) and pass each
    Ctrl-C on to it: the first stops it at the next iteration, a second stops it at once."""
    cmd = command(spec, run_dir)
    with (run_dir / "log.txt").open("a", buffering=1) as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1,
                                start_new_session=True, env=stacks.agent_env(),
                                preexec_fn=_stop_with_parent)
        return stream(proc, log, on_event, lambda: proc.send_signal(signal.SIGINT))
