"""CPU utilization as the paper defines it, and the process's own CPU time and memory."""

from __future__ import annotations

import time
from typing import Any

import psutil

from tbdkit.core.metric import metric


class CpuCollector:
    """System CPU utilization = sum over cores of active time / (cores x elapsed), from the
    kernel's cumulative CPU times read at the window's start and end (exact, no sampling)."""

    name = "cpu"

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.cores = psutil.cpu_count(logical=True) or 1
        self._peak_rss = 0

    @staticmethod
    def _busy_total() -> tuple[float, float]:
        """(active, total) CPU seconds summed over cores since boot. Active = user + nice +
        system + irq + softirq (Linux counts guest time inside user/nice); steal (time the
        hypervisor gave to other VMs) is neither ours nor idle, so it is left out of both."""
        t = psutil.cpu_times()
        busy = sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))
        idle = t.idle + getattr(t, "iowait", 0.0)
        return busy, busy + idle

    def _proc_cpu(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    def start(self) -> None:
        self._busy0, self._total0 = self._busy_total()
        self._proc0 = self._proc_cpu()
        self._wall0 = time.perf_counter()
        self._peak_rss = self.proc.memory_info().rss
        self._last = (self._busy0, self._total0)

    def _percent_since_last(self) -> float | None:
        """System CPU utilization since the previous sample (the window's start for the first), from
        the same cumulative CPU times as the window's metric. psutil.cpu_percent(interval=None) keeps its
        reference per thread: primed at start() on the agent's thread, its first reading on the
        sampler's thread had no reference and was 0.0. None when the kernel's clock ticks (10 ms)
        did not advance since the previous sample."""
        busy, total = self._busy_total()
        busy0, total0 = self._last
        self._last = (busy, total)
        return round(100.0 * (busy - busy0) / (total - total0), 1) if total > total0 else None

    def sample(self) -> dict[str, Any]:
        rss = self.proc.memory_info().rss
        self._peak_rss = max(self._peak_rss, rss)
        return {"cpu_percent": self._percent_since_last(), "rss_mib": round(rss / 2**20, 1)}

    def stop(self) -> dict[str, dict[str, Any]]:
        busy1, total1 = self._busy_total()
        wall = time.perf_counter() - self._wall0
        proc = self._proc_cpu() - self._proc0
        self._peak_rss = max(self._peak_rss, self.proc.memory_info().rss)
        util = 100.0 * (busy1 - self._busy0) / max(total1 - self._total0, 1e-9)
        return {
            "cpu_utilization": metric(
                util,
                "%",
                f"psutil.cpu_times() deltas over the sample window, all {self.cores} logical cores: "
                "sum of non-idle time / (cores x elapsed) (paper's definition)",
                collector=self.name,
            ),
            "process_cpu_utilization": metric(
                100.0 * proc / max(wall * self.cores, 1e-9),
                "%",
                "agent process user+system CPU time / (cores x window wall time)",
                collector=self.name,
                cores_busy=round(proc / max(wall, 1e-9), 3),
            ),
            "peak_rss": metric(
                self._peak_rss / 2**20,
                "MiB",
                "agent process resident set size, max of samples in the window",
                collector=self.name,
            ),
        }
