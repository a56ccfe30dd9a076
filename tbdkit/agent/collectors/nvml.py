"""GPU utilization and memory from NVML, inside the sample window only."""

from __future__ import annotations

import time
from statistics import fmean
from typing import Any

from tbdkit.metric import metric, missing

UTIL_METHOD = ("NVML nvmlDeviceGetSamples(GPU_UTILIZATION_SAMPLES) over the window: the driver's "
               "per-period share of time with at least one kernel running, averaged")
MEM_METHOD = "NVML nvmlDeviceGetMemoryInfo().used, max of samples in the window (all processes on the GPU)"


class NvmlCollector:
    name = "nvml"

    def __init__(self, cuda_index: int | None, uuid: str | None = None) -> None:
        self.handle: Any = None
        self.reason: str | None = None
        self.polled_util: list[float] = []
        self.peak_mem = 0.0
        if cuda_index is None:
            self.reason = "the run is on the CPU: there is no GPU to measure"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = self._by_uuid(uuid) or pynvml.nvmlDeviceGetHandleByIndex(cuda_index)
        except Exception as exc:  # NVML missing or failing is a measurement gap, never a crash
            self.reason = f"NVML is not usable here ({type(exc).__name__}: {exc})"
            self.handle = None

    def _by_uuid(self, uuid: str | None) -> Any:
        """The framework's device by UUID: NVML and CUDA may number GPUs differently."""
        if not uuid:
            return None
        try:
            return self.nvml.nvmlDeviceGetHandleByUUID(uuid if uuid[:4] in ("GPU-", "MIG-") else f"GPU-{uuid}")
        except Exception:
            return None

    def start(self) -> None:
        self.t0_us = int(time.time() * 1e6)
        self.polled_util.clear()
        self.peak_mem = 0.0

    def sample(self) -> dict[str, Any]:
        if self.handle is None:
            return {}
        n = self.nvml
        util = n.nvmlDeviceGetUtilizationRates(self.handle)
        mem = n.nvmlDeviceGetMemoryInfo(self.handle).used / 2**20
        self.polled_util.append(float(util.gpu))
        self.peak_mem = max(self.peak_mem, mem)
        row = {"gpu_util_percent": util.gpu, "gpu_mem_util_percent": util.memory, "gpu_mem_used_mib": round(mem, 1)}
        try:
            row["gpu_power_w"] = n.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
            row["gpu_sm_clock_mhz"] = n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM)
        except Exception:
            pass
        return row

    def _driver_samples(self, t1_us: int) -> list[float]:
        n = self.nvml
        _, samples = n.nvmlDeviceGetSamples(self.handle, n.NVML_GPU_UTILIZATION_SAMPLES, self.t0_us)
        return [float(s.sampleValue.uiVal) for s in samples if self.t0_us <= s.timeStamp <= t1_us]

    def stop(self) -> dict[str, dict[str, Any]]:
        if self.handle is None:
            reason = self.reason or "NVML is not usable here"
            return {"gpu_utilization": missing("%", UTIL_METHOD, reason),
                    "gpu_memory_used_peak": missing("MiB", MEM_METHOD, reason)}
        t1_us = int(time.time() * 1e6)
        try:
            values, method = self._driver_samples(t1_us), UTIL_METHOD
        except Exception:
            values, method = [], ""
        if not values:
            values = self.polled_util
            method = "NVML nvmlDeviceGetUtilizationRates().gpu polled by the sampler thread, averaged"
        util = (metric(fmean(values), "%", method, collector=self.name, samples=len(values)) if values
                else missing("%", UTIL_METHOD, "the window was shorter than one NVML sample period"))
        mem = (metric(self.peak_mem, "MiB", MEM_METHOD, collector=self.name) if self.peak_mem
               else missing("MiB", MEM_METHOD, "no sample fell inside the window"))
        return {"gpu_utilization": util, "gpu_memory_used_peak": mem}
