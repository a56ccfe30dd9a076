"""GPU utilization and memory from NVML, inside the sample window only.

The driver keeps its own utilization samples (one per sample period, about 1/6 s) in a ring buffer
that holds only the last few seconds to minutes, depending on the GPU. So the collector drains that
buffer at every sampler tick (nvmlDeviceGetSamples since the newest sample it has) rather than once
at the window's end, and the summary says how much of the window the samples it got cover.
"""

from __future__ import annotations

import time
from statistics import fmean, median
from typing import Any

from tbdkit.core.metric import metric, missing
from tbdkit.env.nvml import nvml_handle

UTIL_METHOD = (
    "NVML nvmlDeviceGetSamples(GPU_UTILIZATION_SAMPLES), drained at every sampler tick over the window: "
    "the driver's per-period share of time with at least one kernel running, averaged over the periods wholly "
    "inside the window"
)
POLLED_METHOD = "NVML nvmlDeviceGetUtilizationRates().gpu polled by the sampler thread, averaged"
MEM_METHOD = (
    "NVML nvmlDeviceGetMemoryInfo_v2().used: memory allocated on the GPU (all processes), the driver's reserve "
    "apart (driver_reserved_mib), max of samples in the window"
)
MEM_V1_METHOD = "NVML nvmlDeviceGetMemoryInfo().used, max of samples in the window (all processes on the GPU)"
WHOLE = 0.95  # a window whose samples cover at least this share of it counts as covered whole


def sample_period_us(timestamps_us: list[int]) -> int | None:
    """The driver's sample period: the median spacing of its samples' stamps; None with fewer than two."""
    ts = sorted(set(timestamps_us))
    return int(median(b - a for a, b in zip(ts, ts[1:]))) if len(ts) > 1 else None


def whole_periods(samples: dict[int, float], t0_us: int, period: int | None = None) -> dict[int, float]:
    """The samples (stamp in µs -> value) whose whole period lies after t0. The driver stamps a sample at the
    end of the period it describes, so the first one stamped after t0 also covers time before it (an
    H200's idle second read 7.4% after a busy one). `period` (µs): sample_period_us of these samples, when the
    caller has it already. All of them when the period is unknown."""
    period = period or sample_period_us(list(samples))
    if period is None:
        return samples
    return {t: v for t, v in samples.items() if t - period >= t0_us} or samples


def coverage(timestamps_us: list[int], t0_us: int, t1_us: int) -> dict[str, Any]:
    """How much of the window [t0, t1] the driver's samples cover: the span from the window's start
    to its end, less every gap between consecutive samples (and at either end) longer than twice the
    sample period (the median spacing), which is time the buffer lost before it was drained."""
    window = max(t1_us - t0_us, 1)
    ts = sorted(t for t in timestamps_us if t0_us <= t <= t1_us)
    if not ts:
        return {"first_sample_s": None, "last_sample_s": None, "coverage": 0.0, "gaps": 0}
    period = sample_period_us(ts) or window
    edges = [t0_us, *ts, t1_us]
    lost = [b - a for a, b in zip(edges, edges[1:]) if b - a > 2 * period]
    return {
        "first_sample_s": round((ts[0] - t0_us) / 1e6, 3),
        "last_sample_s": round((ts[-1] - t0_us) / 1e6, 3),
        "coverage": round(max(0.0, 1.0 - sum(lost) / window), 4),
        "gaps": len(lost),
    }


class NvmlCollector:
    name = "nvml"

    def __init__(self, cuda_index: int | None, uuid: str | None = None, pci_bus_id: str | None = None) -> None:
        self.handle: Any = None
        self.reason: str | None = None
        self.selected: str | None = None
        self.errors: dict[str, str] = {}  # query -> its first error in the window
        self.polled_util: list[float] = []
        self.driver: dict[int, float] = {}  # driver sample timestamp (us) -> utilization %
        self.peak_mem = 0.0
        self.reserved_mem: float | None = None  # the driver's reserve, MiB (nvmlMemory_v2_t.reserved)
        self.no_v2: str | None = None  # why nvmlDeviceGetMemoryInfo_v2 is not used (v1 counts the reserve as used)
        self.v2_answered = False
        if cuda_index is None:
            self.reason = "the run is on the CPU: there is no GPU to measure"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle, self.selected = nvml_handle(pynvml, cuda_index, uuid, pci_bus_id)
        except Exception as exc:  # NVML missing or failing is a measurement gap, never a crash
            self.reason = f"NVML is not usable here ({type(exc).__name__}: {exc})"
            self.handle = None

    def start(self) -> None:
        self.t0_us = int(time.time() * 1e6)
        self.last_seen_us = self.t0_us
        self.polled_util.clear()
        self.driver.clear()
        self.errors.clear()
        self.peak_mem = 0.0
        self.reserved_mem = None

    def _memory(self) -> tuple[float, float | None] | None:
        """(used MiB, the driver's reserve MiB) from nvmlDeviceGetMemoryInfo_v2, whose `used` leaves out the
        reserve that v1's `used` (total - free) includes; v1 (reserve None) where this NVML has no v2."""
        n = self.nvml
        if self.no_v2 is None:
            try:
                m = n.nvmlDeviceGetMemoryInfo(self.handle, version=n.nvmlMemory_v2)
                self.v2_answered = True
                return m.used / 2**20, m.reserved / 2**20
            except Exception as exc:
                if self.v2_answered:  # it answered before: a failing sample, never a switch of meaning mid-window
                    self.errors.setdefault("nvmlDeviceGetMemoryInfo", f"(_v2) {type(exc).__name__}: {exc}")
                    return None
                self.no_v2 = f"{type(exc).__name__}: {exc}"  # an NVML without the entry point: v1 from now on
        mem = self._query("nvmlDeviceGetMemoryInfo", n.nvmlDeviceGetMemoryInfo, self.handle)
        return None if mem is None else (mem.used / 2**20, None)

    def _query(self, what: str, fn: Any, *args: Any) -> Any:
        """One NVML query; an error (NOT_SUPPORTED on a MIG slice, a lost GPU) is noted, never raised."""
        try:
            return fn(*args)
        except Exception as exc:
            self.errors.setdefault(what, f"{type(exc).__name__}: {exc}")
            return None

    def _drain(self) -> None:
        """The driver's utilization samples newer than the newest one already held."""
        n = self.nvml
        try:
            got = n.nvmlDeviceGetSamples(self.handle, n.NVML_GPU_UTILIZATION_SAMPLES, self.last_seen_us)
        except Exception as exc:
            if getattr(exc, "value", None) != getattr(n, "NVML_ERROR_NOT_FOUND", None):  # NOT_FOUND: none newer yet
                self.errors.setdefault("nvmlDeviceGetSamples", f"{type(exc).__name__}: {exc}")
            return
        for s in got[1]:
            if s.timeStamp >= self.t0_us:
                self.driver[int(s.timeStamp)] = float(s.sampleValue.uiVal)
        if self.driver:
            self.last_seen_us = max(self.last_seen_us, max(self.driver))

    def sample(self) -> dict[str, Any]:
        if self.handle is None:
            return {}
        n, row = self.nvml, dict[str, Any]()
        util = self._query("nvmlDeviceGetUtilizationRates", n.nvmlDeviceGetUtilizationRates, self.handle)
        if util is not None:
            self.polled_util.append(float(util.gpu))
            row |= {"gpu_util_percent": util.gpu, "gpu_mem_util_percent": util.memory}
        mem = self._memory()
        if mem is not None:
            used, reserved = mem
            self.peak_mem = max(self.peak_mem, used)
            row["gpu_mem_used_mib"] = round(used, 1)
            if reserved is not None:
                self.reserved_mem = max(self.reserved_mem or 0.0, reserved)
                row["gpu_mem_reserved_mib"] = round(reserved, 1)
        power = self._query("nvmlDeviceGetPowerUsage", n.nvmlDeviceGetPowerUsage, self.handle)
        if power is not None:
            row["gpu_power_w"] = power / 1000.0
        clock = self._query("nvmlDeviceGetClockInfo", n.nvmlDeviceGetClockInfo, self.handle, n.NVML_CLOCK_SM)
        if clock is not None:
            row["gpu_sm_clock_mhz"] = clock
        self._drain()
        return row

    def _failed(self, query: str) -> str:
        return f"; {query} failed: {self.errors[query]}" if query in self.errors else ""

    def stop(self) -> dict[str, dict[str, Any]]:
        if self.handle is None:
            reason = self.reason or "NVML is not usable here"
            return {
                "gpu_utilization": missing("%", UTIL_METHOD, reason),
                "gpu_memory_used_peak": missing("MiB", MEM_METHOD, reason),
            }
        t1_us = int(time.time() * 1e6)
        self._drain()
        inside = {t: v for t, v in self.driver.items() if self.t0_us <= t <= t1_us}
        cov = coverage(list(inside), self.t0_us, t1_us)
        whole = whole_periods(inside, self.t0_us)
        extra = {"device_selected_by": self.selected, "window_s": round((t1_us - self.t0_us) / 1e6, 3), **cov}
        if inside and cov["coverage"] >= WHOLE:
            util = metric(fmean(whole.values()), "%", UTIL_METHOD, collector=self.name, samples=len(whole), **extra)
        elif self.polled_util:
            why = (
                f"the driver's samples cover {cov['coverage']:.0%} of the window"
                if inside
                else "the driver returned no samples in the window" + self._failed("nvmlDeviceGetSamples")
            )
            util = metric(
                fmean(self.polled_util),
                "%",
                POLLED_METHOD,
                collector=self.name,
                samples=len(self.polled_util),
                note=f"{why}: polled instead",
                **extra,
            )
        elif inside:
            util = metric(
                fmean(whole.values()),
                "%",
                UTIL_METHOD,
                collector=self.name,
                samples=len(whole),
                note=f"the driver's samples cover only {cov['coverage']:.0%} of the window",
                **extra,
            )
        else:
            util = missing(
                "%",
                UTIL_METHOD,
                (
                    "no utilization sample fell inside the window"
                    + self._failed("nvmlDeviceGetSamples")
                    + self._failed("nvmlDeviceGetUtilizationRates")
                ),
            )
        method = MEM_V1_METHOD if self.no_v2 else MEM_METHOD
        v1_note = (
            {
                "note": f"this NVML has no nvmlDeviceGetMemoryInfo_v2 ({self.no_v2}): the value includes the driver's "
                "reserve (about 0.5 GiB on an H100)"
            }
            if self.no_v2
            else {}
        )
        mem = (
            metric(
                self.peak_mem,
                "MiB",
                method,
                collector=self.name,
                device_selected_by=self.selected,
                driver_reserved_mib=None if self.reserved_mem is None else round(self.reserved_mem, 1),
                **v1_note,
            )
            if self.peak_mem
            else missing(
                "MiB", method, "no memory sample fell inside the window" + self._failed("nvmlDeviceGetMemoryInfo")
            )
        )
        return {"gpu_utilization": util, "gpu_memory_used_peak": mem}
