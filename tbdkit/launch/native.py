"""The native launcher: the agent runs in a local Python, by default the framework stack's own
virtual environment; `tbdkit.bench.reference` runs it under Nsight Compute with a command prefix.
StackLauncher is what it shares with the netns launcher: the frameworks are the stacks installed here."""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tbdkit.core.errors import UserError
from tbdkit.env import cpus, stacks
from tbdkit.launch import group
from tbdkit.launch.base import Busy, EventHandler, quiet, stream
from tbdkit.results.rundir import RunDir
from tbdkit.spec import catalog
from tbdkit.spec.run_spec import RunSpec

TIMED_OUT = 124  # the exit code of a run ended at its time limit (as timeout(1))


def command(spec: RunSpec, run_dir: Path) -> list[str]:
    """The agent's command line in the framework stack's virtual environment."""
    return agent_command(str(stacks.require(spec.framework)), spec, run_dir)


def agent_command(python: str, spec: RunSpec, run_dir: Path) -> list[str]:
    agent = ["-m", "tbdkit.agent", "--spec", str(RunDir(run_dir).spec), "--run-dir", str(run_dir)]
    if spec.processes > 1:  # several workers on this machine: torchrun starts them
        return [
            python,
            "-u",
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes=1",
            f"--nproc-per-node={spec.gpus_per_node}",
            *agent,
        ]
    return [python, "-u", *agent]


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


class StackLauncher:
    """What the launchers that run the framework stacks' virtual environments (native, netns) share: the
    frameworks are the stacks installed here, asked themselves whether they see a GPU."""

    def frameworks(self, model: catalog.Model, requested: list[str], setup: bool) -> list[str]:
        """Those requested, else every one of the model's whose stack is installed here, else (with
        `setup`) the model's first: a UserError when none is installed and none may be set up."""
        if requested == ["all"]:
            requested = list(model.frameworks)
        for fw in requested:
            catalog.check_framework(model, fw)
        if requested:
            return list(requested)
        chosen = [fw for fw in model.frameworks if fw in stacks.STACKS and stacks.is_installed(fw)]
        if chosen:
            return chosen
        first = next((fw for fw in model.frameworks if fw in stacks.STACKS), None)
        if first is None or not setup:
            raise UserError(
                f"No framework stack for {model.name} is installed: run `tbdkit setup "
                f"{first or 'pytorch'}` or pass --setup."
            )
        return [first]

    def framework_gpus(self, framework: str) -> tuple[int | None, str | None]:
        """(GPUs the framework sees, why none), asked of the stack's own interpreter (tbdkit.adapters.probe);
        None when its stack is not installed here (nothing to ask)."""
        if framework not in stacks.STACKS or not stacks.is_installed(framework):
            return None, None
        try:
            proc = subprocess.run(
                [str(stacks.python_of(framework)), "-m", "tbdkit.adapters.probe", framework],
                capture_output=True,
                text=True,
                timeout=600,
                env=stacks.agent_env(),
            )
        except subprocess.TimeoutExpired:
            return 0, f"the {framework} stack did not answer within 600 s whether it sees a GPU"
        try:
            answer = json.loads(proc.stdout.strip().splitlines()[-1])
            return int(answer["gpus"]), answer.get("reason")
        except (IndexError, KeyError, ValueError):
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return 0, f"asking the {framework} stack for its GPUs failed ({tail})"

    def preflight(self, framework: str, device: str, setup: bool = False, busy: Busy = quiet) -> None:
        """The framework's stack is installed here (with `setup`, installed or brought up to its lock first)."""
        stack = stacks.get(framework)
        if setup and not stacks.is_current(framework):
            with busy(f"setting up the {stack.title} stack in {stacks.venv_path(framework)} ..."):
                stacks.setup(framework)
        stacks.require(framework)

    def finish(
        self, spec: RunSpec, run_dir: Path, exit_code: int, summary: dict[str, Any], by_agent: bool
    ) -> dict[str, Any]:
        return summary


@dataclass(frozen=True)
class NativeLauncher(StackLauncher):
    """The launcher (tbdkit.launch.base.Launcher) for a local Python. `prefix` runs in front of the
    agent (ncu, which forks it); `python` and `env` replace the stack's; past `timeout_s` the run's
    whole process group is ended and the exit code is TIMED_OUT."""

    name = "native"
    prefix: tuple[str, ...] = ()
    python: str | None = None
    env: dict[str, str] | None = None
    timeout_s: float | None = None

    def command(self, spec: RunSpec, run_dir: Path) -> list[str]:
        own = command(spec, run_dir) if self.python is None else agent_command(self.python, spec, run_dir)
        return [*self.prefix, *own]

    def preflight(self, framework: str, device: str, setup: bool = False, busy: Busy = quiet) -> None:
        """The stack's environment, unless this launcher runs another Python."""
        if self.python is None:
            super().preflight(framework, device, setup, busy)

    def run(self, spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int:
        """The agent in the framework stack's virtual environment (the launcher `bench` and sweeps use);
        several TensorFlow or MXNet workers as their own processes (tbdkit.launch.group); one process
        for a node's replicas under --one-process."""
        if spec.processes > 1 and spec.framework != "pytorch":
            return group.run(spec, run_dir, on_event, group.local_roles(spec, group.host_gpus()))
        return self.run_agent(spec, run_dir, on_event)

    def run_agent(self, spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int:
        """Start the agent in its own session (so a terminal's Ctrl-C reaches only us) and pass each
        Ctrl-C on to it: the first stops it at the next iteration, a second stops it at once. An
        exception out of `on_event` ends the run's process group and goes on up."""
        cmd = self.command(spec, run_dir)
        with RunDir(run_dir).log.open("a", buffering=1) as log:
            log.write("$ " + shlex.join(cmd) + "\n")
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                bufsize=1,
                start_new_session=True,
                env={**(self.env if self.env is not None else stacks.agent_env()), **thread_env(spec)},
                preexec_fn=_stop_with_parent,
            )
            expired = threading.Event()

            def expire() -> None:
                expired.set()
                log.write(f"timed out after {self.timeout_s} s: ending its process group\n")
                end_group(proc)

            timer = threading.Timer(self.timeout_s, expire) if self.timeout_s is not None else None
            if timer is not None:
                timer.daemon = True
                timer.start()
            try:
                code = stream(proc, log, on_event, lambda: proc.send_signal(signal.SIGINT))
            except BaseException:
                end_group(proc)
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            return TIMED_OUT if expired.is_set() else code


def thread_env(spec: RunSpec) -> dict[str, str]:
    """OpenMP's and MXNet's threads from the run's CPU budget, in the agent's environment before it
    starts (tbdkit.env.cpus; the agent applies the same budget again before any framework loads)."""
    return cpus.thread_env(cpus.plan(spec.cpus, spec.pin, 0 if spec.data == "synthetic" else 1, spec.workers_here))


def run(spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int:
    """The agent in the framework stack's virtual environment (NativeLauncher, the launcher of `bench`)."""
    return NativeLauncher().run(spec, run_dir, on_event)


def end_group(proc: subprocess.Popen[str], grace_s: float = 10.0) -> None:
    """SIGTERM to the whole process group `proc` leads, SIGKILL to what is left after `grace_s`:
    a prefix such as ncu forks the agent, and ending the prefix alone would leave it on the GPU."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        if sig == signal.SIGKILL:
            break
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _group_alive(proc.pid):
            proc.poll()
            time.sleep(0.1)
        if not _group_alive(proc.pid):
            break
    proc.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
