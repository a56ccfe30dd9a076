"""Run the processes of a data-parallel TensorFlow or MXNet job (tbdkit.launch.roles) as torchrun
runs PyTorch's: rank 0's output drives the progress display and goes to log.txt, every other
process's to workers/<role>.log; the first process that fails ends the job (a worker left alone
would wait for its peers forever), and its rank and exit code are written to log.txt in torchrun's
words, which tbdkit.launch.workers reads to name it. Nothing of the job outlives it."""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tbdkit.core.errors import UserError
from tbdkit.env import stacks
from tbdkit.launch.base import EventHandler, stream
from tbdkit.launch.roles import MXNET_SERVER_CODE, Role, roles, worker_failed
from tbdkit.results import summary as summaries
from tbdkit.results.rundir import RunDir
from tbdkit.spec.run_spec import RunSpec

POLL_S = 0.5
WORKERS_GRACE_S = 180.0  # after rank 0 ends: the others finish writing their own results
SERVERS_GRACE_S = 30.0  # after the workers: MXNet's servers and scheduler end with them
END_GRACE_S = 20.0  # after a failure: the others' clean stop before they are killed
INTERRUPTED = summaries.exit_code(summaries.Status.INTERRUPTED)  # a worker stopped by Ctrl-C: not a failure


def host_gpus() -> list[str]:
    """This machine's GPUs as CUDA_VISIBLE_DEVICES may name them: the entries of the caller's own
    CUDA_VISIBLE_DEVICES if set, else every GPU's UUID from NVML (order-proof), else none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [v.strip() for v in visible.split(",") if v.strip()]
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return [
                pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                for i in range(pynvml.nvmlDeviceGetCount())
            ]
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return []


def new_port() -> int:
    """A base port for the job: the control channel; TensorFlow's workers and MXNet's scheduler above it."""
    return 20000 + secrets.randbelow(20000)


def new_key() -> str:
    return secrets.token_hex(16)


def command(spec: RunSpec, run_dir: Path, role: Role) -> list[str]:
    python = str(stacks.require(spec.framework))
    if role.rank is None:
        return [python, "-u", "-c", MXNET_SERVER_CODE]
    return [python, "-u", "-m", "tbdkit.agent", "--spec", str(RunDir(run_dir).spec), "--run-dir", str(run_dir)]


def gpus_for(spec: RunSpec, host_gpus: list[str]) -> list[str] | None:
    """One GPU per worker where the job runs on GPUs, None on the CPU."""
    if spec.device == "cpu" or not host_gpus:
        return None
    if len(host_gpus) < spec.world_size:
        raise UserError(
            f"{spec.nodes} nodes x {spec.gpus_per_node} GPUs need {spec.world_size} GPUs and this machine "
            f"has {len(host_gpus)}: use fewer --nodes or --gpus-per-node, or --device cpu."
        )
    return host_gpus[: spec.world_size]


def local_roles(spec: RunSpec, host_gpus: list[str]) -> list[Role]:
    """The job's processes on this machine (the native launcher): every node is 127.0.0.1."""
    return roles(spec, ["127.0.0.1"] * spec.nodes, new_port(), new_key(), gpus_for(spec, host_gpus))


def run(
    spec: RunSpec,
    run_dir: Path,
    on_event: EventHandler,
    job: list[Role],
    prefix: Callable[[Role], list[str]] = lambda role: [],
    log_mode: str = "a",
) -> int:
    """Start every role (rank 0 last, its stdout followed here) and return the job's exit code:
    rank 0's, else the first other worker's that failed."""
    RunDir(run_dir).workers.mkdir(exist_ok=True)
    procs: dict[str, subprocess.Popen[str]] = {}
    files: list[IO[str]] = []
    by_name = {r.name: r for r in job}
    first_failure: list[str] = []
    lock = threading.Lock()
    done = threading.Event()
    with RunDir(run_dir).log.open(log_mode, buffering=1) as log:

        def end_all() -> None:
            """SIGTERM (a worker stops cleanly at its next step), then SIGKILL: a worker blocked in its
            framework's collective, waiting for the peer that died, never reaches the next step."""
            for proc in procs.values():
                _signal(proc, signal.SIGTERM)
            deadline = time.monotonic() + END_GRACE_S
            while time.monotonic() < deadline and any(p.poll() is None for p in procs.values()):
                time.sleep(POLL_S)
            for proc in procs.values():
                if proc.poll() is None:
                    _signal(proc, signal.SIGKILL)

        def report(name: str, proc: subprocess.Popen[str], code: int) -> None:
            role = by_name[name]
            if role.rank is not None:  # torchrun's words: tbdkit.launch.workers reads them
                log.write(worker_failed(role, proc.pid, code) + "\n")
            else:
                log.write(f"{name} (node {role.node}) exited with code {code}: ending the job\n")

        def failed(proc: subprocess.Popen[str]) -> int | None:
            code = proc.poll()
            return None if code is None or code in (0, INTERRUPTED) else code

        def watch() -> None:
            while not done.wait(POLL_S):
                for name, proc in list(procs.items()):
                    code = failed(proc)
                    if code is None or first_failure:
                        continue
                    with lock:
                        first_failure.append(name)
                        report(name, proc, code)
                    end_all()

        try:
            ordered = [r for r in job if r.rank != 0] + [r for r in job if r.rank == 0]
            for role in ordered:
                procs[role.name] = _start(role, [*prefix(role), *command(spec, run_dir, role)], run_dir, log, files)
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            head = procs["rank0"]

            def interrupt() -> None:
                for name, proc in procs.items():
                    if by_name[name].rank is not None:
                        _signal(proc, signal.SIGINT)

            code = stream(head, log, on_event, interrupt)
            workers = [p for n, p in procs.items() if by_name[n].rank not in (None, 0)]
            others = [_wait(p, WORKERS_GRACE_S) for p in workers]
            for name, proc in procs.items():
                if by_name[name].rank is None:
                    _wait(proc, SERVERS_GRACE_S)
            done.set()
            watcher.join()
            # Every process ended before the watcher's next look (a worker died and rank 0, its peer lost, exited
            # at once): none was ended by this launcher, so each worker that failed failed by itself and is reported.
            with lock:
                if not first_failure:
                    for name, proc in procs.items():
                        if by_name[name].rank is not None and (failure := failed(proc)) is not None:
                            report(name, proc, failure)
            return code or next((c for c in others if c), 0)
        finally:
            done.set()
            for proc in procs.values():
                _end(proc)
            for f in files:
                f.close()


def _start(role: Role, cmd: list[str], run_dir: Path, log: IO[str], files: list[IO[str]]) -> subprocess.Popen[str]:
    """One role's process, its command and environment written to the job's log first: rank 0's stdout piped
    (followed by the launcher), every other role's output in its own log (its file kept in `files`)."""
    log.write(
        f"# {role.name} (node {role.node}): "
        + " ".join(f"{k}={shlex.quote(v)}" for k, v in role.env.items() if k != "TBDKIT_CONTROL_KEY")
        + "\n$ "
        + shlex.join(cmd)
        + "\n"
    )
    env = {**stacks.agent_env(), **role.env}
    if role.rank == 0:
        return subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1, start_new_session=True, env=env
        )
    out = RunDir(run_dir).role_log(role.name).open("w")
    files.append(out)
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)


def _wait(proc: subprocess.Popen[str], timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end(proc)
        return proc.wait()


def _end(proc: subprocess.Popen[str], grace_s: float = 10.0) -> None:
    """SIGTERM to the process's group, SIGKILL after `grace_s` (as tbdkit.launch.native.end_group,
    not imported: native starts this module's jobs)."""
    if proc.poll() is not None:
        return
    _signal(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGKILL)
        proc.wait()


def _signal(proc: subprocess.Popen[str], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
