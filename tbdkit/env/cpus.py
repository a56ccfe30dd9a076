"""The CPU budget of a run: which cores it may use, and how many threads each framework gets.

The cores a process may use are the smaller of its affinity mask (os.sched_getaffinity: taskset,
`docker --cpuset-cpus`, Slurm's binding) and its cgroup's CPU quota (cgroup v2 cpu.max, v1
cpu.cfs_quota_us / cpu.cfs_period_us: `docker --cpus`, Kubernetes limits), rounded down, at least 1.
A run gets `--cpus N` of them (default: all). Its budget is split so that no two thread pools fight
for a core: a data-loading worker (the prefetch thread of a real dataset) takes one core, the
framework's intra-op pool the rest (at least one), and the inter-op pool one thread (Intel's CPU
guidance for TensorFlow and PyTorch: one inter-op thread per socket; a training step's ops run
one after the other, each parallel inside).

Threads are set where each framework reads them: the OpenMP and MXNet variables in the agent's
environment before any framework loads (`thread_env`; the launcher and the agent both apply it),
PyTorch's and TensorFlow's own calls in their adapters (`Budget.intra_op` / `inter_op`).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")


def affinity() -> list[int]:
    """The logical CPUs this process may run on (its affinity mask)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


ONLINE = Path("/sys/devices/system/cpu/online")


def parse_cpu_list(text: str) -> list[int]:
    """The CPUs of a kernel CPU list ("0-3,8,10-11", as /sys/devices/system/cpu/online and cpuset.cpus write it)."""
    cores: set[int] = set()
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cores.update(range(int(first), int(last or first) + 1))
    return sorted(cores)


def cpu_list(cores: list[int]) -> str:
    """`cores` as a kernel CPU list, runs written as ranges ("0-3,8"): what `docker --cpuset-cpus` takes."""
    runs: list[list[int]] = []
    for core in sorted(set(cores)):
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def online(path: Path = ONLINE) -> list[int]:
    """The machine's online logical CPUs (every process's mask is a subset of them)."""
    try:
        return parse_cpu_list(path.read_text())
    except (OSError, ValueError):  # not Linux
        return list(range(os.cpu_count() or 1))


def _cgroup_dir(root: Path) -> Path:
    """This process's own cgroup (v2: the line `0::/path` of /proc/self/cgroup), else the root."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                own = root / line[3:].lstrip("/")
                if (own / "cpu.max").is_file():
                    return own
    except OSError:
        pass
    return root


def cgroup_quota(root: Path = CGROUP_ROOT) -> dict[str, Any]:
    """The cgroup CPU quota in cores, or cores None with the reason (no limit, no cgroup files)."""
    v2 = _cgroup_dir(root) / "cpu.max"
    try:
        quota, period = v2.read_text().split()[:2]
        if quota == "max":
            return {"cores": None, "source": str(v2), "reason": "no quota (cpu.max is 'max')"}
        return {"cores": round(int(quota) / int(period), 3), "source": str(v2)}
    except (OSError, ValueError):
        pass
    v1 = root / "cpu" / "cpu.cfs_quota_us"
    try:
        quota_us = int(v1.read_text())
        period_us = int((v1.parent / "cpu.cfs_period_us").read_text())
        if quota_us < 0:
            return {"cores": None, "source": str(v1), "reason": "no quota (cpu.cfs_quota_us is -1)"}
        return {"cores": round(quota_us / period_us, 3), "source": str(v1)}
    except (OSError, ValueError):
        return {"cores": None, "source": None, "reason": f"no cgroup CPU quota file ({v2} nor {v1})"}


def available(quota: dict[str, Any] | None = None, mask: list[int] | None = None) -> int:
    """Cores this process may use: its affinity mask, capped by the cgroup quota (rounded down, >= 1)."""
    mask = mask if mask is not None else affinity()
    quota = quota if quota is not None else cgroup_quota()
    cores = len(mask)
    if quota.get("cores") is not None:
        cores = min(cores, max(1, math.floor(quota["cores"])))
    return max(1, cores)


@dataclass(frozen=True)
class Budget:
    """The cores a run (one worker) was given and how its threads share them."""

    cpus: int  # cores given to this worker
    source: str  # where the number came from
    intra_op: int  # the framework's intra-op (OpenMP / Eigen) pool
    inter_op: int  # the framework's inter-op pool (MXNet: its CPU engine workers)
    data_workers: int  # data-loading threads counted against the budget
    pinned: list[int] | None  # cores the process is pinned to (--pin), else None
    affinity: list[int] = field(default_factory=list)
    cgroup_quota: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return asdict(self)


def plan(
    requested: int | None,
    pin: bool,
    data_workers: int,
    workers_here: int = 1,
    mask: list[int] | None = None,
    quota: dict[str, Any] | None = None,
) -> Budget:
    """The budget of one worker: `requested` cores (None: every core available) shared by the
    `workers_here` workers of this machine; `data_workers` loading threads come out of it."""
    mask = mask if mask is not None else affinity()
    quota = quota if quota is not None else cgroup_quota()
    here = available(quota, mask)
    if requested is None:
        total, source = here, f"every core available ({len(mask)} in the affinity mask"
        source += f", cgroup quota {quota['cores']} cores)" if quota.get("cores") is not None else ", no cgroup quota)"
    else:
        total, source = requested, "--cpus"
    cpus = max(1, total // max(1, workers_here))
    if workers_here > 1:
        source += f", split over {workers_here} workers"
    intra = max(1, cpus - data_workers)
    return Budget(
        cpus=cpus,
        source=source,
        intra_op=intra,
        inter_op=1,
        data_workers=data_workers,
        pinned=mask[:cpus] if pin else None,
        affinity=mask,
        cgroup_quota=quota,
    )


def check_request(requested: int | None) -> str | None:
    """Why `--cpus requested` cannot be given here (one sentence and the fix), or None."""
    if requested is None:
        return None
    here = available()
    if requested > here:
        return (
            f"--cpus {requested} asks for more cores than this process may use ({here}: affinity mask and "
            f"cgroup quota); pass --cpus {here} or fewer"
        )
    return None


def thread_env(budget: Budget) -> dict[str, str]:
    """The variables the OpenMP runtime, MKL and MXNet read once, when their library loads."""
    return {
        "OMP_NUM_THREADS": str(budget.intra_op),
        "MKL_NUM_THREADS": str(budget.intra_op),
        "MXNET_CPU_WORKER_NTHREADS": str(budget.inter_op),
        "MXNET_CPU_PRIORITY_NTHREADS": str(budget.inter_op),
    }


def pin(budget: Budget) -> list[int] | None:
    """Pin this process (and the threads it starts from now on) to the budget's cores."""
    if budget.pinned is None:
        return None
    os.sched_setaffinity(0, budget.pinned)
    return sorted(os.sched_getaffinity(0))
