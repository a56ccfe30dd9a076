"""The agent as one worker of a data-parallel job (paper Sec. IV-E), started by torchrun for
PyTorch, by tbdkit.launch.roles' processes for TensorFlow and MXNet.

Either gives every worker RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK (its node) and the
rendezvous address. Rank 0 writes the run directory as a single-worker run does, plus the
job's aggregate metrics; every other worker writes its own iterations and summary under
workers/rank<N>/. The framework half (the process group, DistributedDataParallel) is the
adapter's `join`; what is framework-neutral — where files go, how workers agree to stop,
the aggregate metrics — is here.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tbdkit.adapters import ChannelSync, ParameterSync
from tbdkit.agent.control import Control
from tbdkit.core.metric import metric
from tbdkit.results.rundir import RunDir


@dataclass(frozen=True)
class Worker:
    rank: int
    local_rank: int
    world_size: int
    node_rank: int
    master_addr: str
    master_port: int = 29500

    @property
    def label(self) -> str:
        return f"rank {self.rank} (node {self.node_rank}, local rank {self.local_rank})"

    def run_dir(self, job_dir: Path) -> Path:
        """Where this worker writes: the job's run directory for rank 0, workers/rank<N>/ for the others."""
        path = RunDir(job_dir).rank(self.rank).path
        path.mkdir(parents=True, exist_ok=True)
        return path


def from_env(env: dict[str, str] | None = None) -> Worker | None:
    """This process's place in a torchrun job, or None for a single-worker run."""
    env = dict(os.environ if env is None else env)
    if int(env.get("WORLD_SIZE", "1")) <= 1:
        return None
    return Worker(
        rank=int(env["RANK"]),
        local_rank=int(env.get("LOCAL_RANK", "0")),
        world_size=int(env["WORLD_SIZE"]),
        node_rank=int(env.get("GROUP_RANK", "0")),
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int(env.get("MASTER_PORT", "29500")),
    )


CONTROL_KEY_ENV = "TBDKIT_CONTROL_KEY"  # the launcher's secret for the control channel (hex)


class WithControl:
    """The Distributed capability of a framework whose adapter keeps the parameters in sync
    (ParameterSync: TensorFlow's MultiWorkerMirroredStrategy, MXNet's dist_sync kvstore) while the
    workers' decisions and results travel over the agent's control channel (tbdkit.agent.control)."""

    def __init__(self, sync: ParameterSync, worker: Worker, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ if env is None else env)
        if CONTROL_KEY_ENV not in env:
            raise RuntimeError(
                f"{CONTROL_KEY_ENV} is not set: start data-parallel {getattr(sync, 'framework', '')} "
                "jobs through tbdkit's launchers (or a file `tbdkit render` wrote)"
            )
        self.sync = sync
        self.control = Control(
            worker.rank,
            worker.world_size,
            (worker.master_addr, worker.master_port),
            bytes.fromhex(env[CONTROL_KEY_ENV]),
        )
        self.backend: str | None = sync.backend
        self.comm: Any = sync.comm
        self.comm_reason: str | None = sync.comm_reason
        self.comm_method = "time in the framework's gradient exchange"
        # a framework's exchange overlaps the backward pass; gradients over the channel are exchanged after it
        self.overlaps_backward = not isinstance(sync, ChannelSync)

    def join(self, world_size: int) -> None:
        self.control.join()
        if isinstance(self.sync, ChannelSync):  # its gradients travel over the channel too
            self.sync.use_channel(self.control.gather)
        self.sync.join(world_size)
        self.backend, self.comm = self.sync.backend, self.sync.comm  # known once joined
        self.comm_method = f"time in the gradient exchange of {self.backend}"

    def agree(self, flags: list[bool]) -> list[bool]:
        return self.control.agree(flags)

    def gather(self, value: Any) -> list[Any]:
        return self.control.gather(value)

    def leave(self) -> None:
        try:
            self.sync.leave()
        finally:
            self.control.leave()


def interface_towards(address: str) -> dict[str, Any]:
    """The network interface this worker reaches the rendezvous host through, and its speed."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((address, 9))  # no packet is sent: this only picks the route's source address
            local = s.getsockname()[0]
    except OSError as exc:
        return {"interface": None, "reason": f"no route to {address}: {exc}"}
    stats = psutil.net_if_stats()
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == local for a in addrs):
            st = stats.get(name)
            return {
                "interface": name,
                "address": local,
                "speed_mbps": st.speed if st and st.speed else None,
                "mtu": st.mtu if st else None,
                "method": "psutil.net_if_stats() of the interface holding the route's source address",
            }
    return {"interface": None, "address": local, "reason": "no interface holds the route's source address"}


def job_metrics(
    per_worker: list[float],
    unit: str,
    comm_share: list[float | None],
    window_s: float,
    comm_timing: str | None = None,
    comm_reason: str | None = None,
    comm_method: str | None = None,
    overlaps_backward: bool = True,
) -> dict[str, Any]:
    """Rank 0's metrics over the job: each worker's window throughput, gathered from all of them."""
    n = len(per_worker)
    shares = [c for c in comm_share if c is not None]
    method = comm_method or (
        "union of the intervals from each gradient bucket's all-reduce launch to its completion (DDP comm hook)"
    )
    return {
        "aggregate_throughput": metric(
            sum(per_worker),
            unit,
            f"sum over the {n} workers of each one's window throughput (each trains its own "
            "batches; the framework's data parallelism keeps them in step)",
            per_worker=[round(v, 6) for v in per_worker],
        ),
        "per_worker_throughput": metric(
            sum(per_worker) / n,
            unit,
            f"mean of the {n} workers' window throughputs",
            min=round(min(per_worker), 6),
            max=round(max(per_worker), 6),
        ),
        "communication_time": metric(
            sum(shares) / len(shares) if shares else None,
            "%",
            f"{method} over the window / window wall time ({window_s:.1f} s), mean over workers; "
            + (
                "it overlaps the backward pass, so it is time in communication, not time added by it"
                if overlaps_backward
                else "it follows the backward pass, so it is time the step waits for it"
            ),
            **({"timing": comm_timing} if comm_timing else {}),
            **({} if shares else {"reason": comm_reason or "no worker timed its all-reduces"}),
        ),
    }


def replica_metrics(throughput: float, replicas: int, unit: str, comm_reason: str | None) -> dict[str, Any]:
    """The job's metrics when one process trains `replicas` replicas (--one-process): its window
    throughput is the job's; a replica's share of it is that / replicas (they step together)."""
    return {
        "aggregate_throughput": metric(
            throughput,
            unit,
            f"the one process's window throughput: each step trains all {replicas} replicas' batches",
            per_worker=[round(throughput, 6)],
            replicas=replicas,
        ),
        "per_worker_throughput": metric(
            throughput / replicas,
            unit,
            f"the process's window throughput / its {replicas} replicas (they step together in one process: "
            "no replica is timed alone)",
        ),
        "communication_time": metric(
            None,
            "%",
            "the replicas' gradient reduction inside the process's step",
            reason=comm_reason or "the framework exposes no timing of its reduction outside a profiler",
        ),
    }
