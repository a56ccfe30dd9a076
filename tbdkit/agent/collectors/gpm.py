"""SM activity, FP32/FP16/tensor pipe and DRAM bandwidth utilization from NVML GPM (GPU
Performance Monitoring: Hopper and newer), inside the sample window only.

GPM metrics are computed between two samples of the GPU's counters (nvmlGpmSampleGet): the
summary's values are between the window's first and last sample (the whole window); each row of
samples.csv holds the values between that sampler tick and the previous one.
"""

from __future__ import annotations

from typing import Any

from tbdkit.core.metric import metric, missing
from tbdkit.env.nvml import nvml_handle

# summary metric -> NVML GPM metric id name (pynvml constants; descriptions from nvml.h)
GPM_METRICS = {
    "gpm_sm_activity": "NVML_GPM_METRIC_SM_UTIL",  # % of SMs busy
    "gpm_fp32_pipe": "NVML_GPM_METRIC_FP32_UTIL",  # % of time SMs did non-tensor FP32 math
    "gpm_fp16_pipe": "NVML_GPM_METRIC_FP16_UTIL",  # % of time SMs did non-tensor FP16 math
    "gpm_tensor_pipe": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",  # % of time SMs did any tensor operation
    "gpm_dram_bandwidth": "NVML_GPM_METRIC_DRAM_BW_UTIL",  # % of the theoretical DRAM bandwidth
}
METHOD = "NVML GPM nvmlGpmMetricsGet({id}) between GPM samples taken at the sample window's start and end"
NO_DCGM = "; DCGM profiling fields could measure it on older GPUs, but tbdkit reads them only through NVML GPM"


class GpmCollector:
    name = "gpm"

    def __init__(
        self, cuda_index: int | None, uuid: str | None = None, pci_bus_id: str | None = None, nvml: Any = None
    ) -> None:
        self.reason: str | None = None
        self.handle: Any = None
        self.samples: list[Any] = []
        self.selected: str | None = None
        if cuda_index is None:
            self.reason = "the run is on the CPU: there is no GPU to measure"
            return
        try:
            if nvml is None:
                import pynvml

                pynvml.nvmlInit()
                nvml = pynvml
            self.nvml = nvml
            self.handle, self.selected = nvml_handle(nvml, cuda_index, uuid, pci_bus_id)
            if not nvml.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice:
                self.reason = "this GPU does not support NVML GPM (Hopper and newer do)" + NO_DCGM
                self.handle = None
        except Exception as exc:  # a measurement gap, never a crash
            self.reason = f"NVML GPM is not usable here ({type(exc).__name__}: {exc})" + NO_DCGM
            self.handle = None

    def _values(self, first: Any, second: Any) -> dict[str, float | str]:
        """Each metric's value between two samples, or the NVML error text for that metric."""
        n = self.nvml
        names = list(GPM_METRICS)
        req = n.c_nvmlGpmMetricsGet_t()
        req.version = n.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(names)
        req.sample1, req.sample2 = first, second
        for i, name in enumerate(names):
            req.metrics[i].metricId = getattr(n, GPM_METRICS[name])
        n.nvmlGpmMetricsGet(req)
        out: dict[str, float | str] = {}
        for i, name in enumerate(names):
            m = req.metrics[i]
            out[name] = float(m.value) if m.nvmlReturn == 0 else f"NVML error {m.nvmlReturn}"
        return out

    def start(self) -> None:
        if self.handle is None:
            return
        try:
            for _ in range(3):  # window start, previous, current: each kept as soon as it exists, to be freed
                self.samples.append(self.nvml.nvmlGpmSampleAlloc())
            self.nvml.nvmlGpmSampleGet(self.handle, self.samples[0])
            self.nvml.nvmlGpmSampleGet(self.handle, self.samples[1])
        except Exception as exc:
            self.reason = f"NVML GPM sampling failed ({type(exc).__name__}: {exc})"
            self.handle = None
            self._free()

    def _free(self) -> None:
        """Every sample allocated goes back to the driver, on every path (a leak is driver memory)."""
        samples, self.samples = self.samples, []
        for s in samples:
            try:
                self.nvml.nvmlGpmSampleFree(s)
            except Exception:
                pass

    def sample(self) -> dict[str, Any]:
        if self.handle is None:
            return {}
        try:
            start, prev, cur = self.samples
            self.nvml.nvmlGpmSampleGet(self.handle, cur)
            values = self._values(prev, cur)
            self.samples = [start, cur, prev]
        except Exception:
            return {}
        return {f"{name}_percent": round(v, 2) for name, v in values.items() if isinstance(v, float)}

    def stop(self) -> dict[str, dict[str, Any]]:
        units = {name: METHOD.format(id=GPM_METRICS[name]) for name in GPM_METRICS}
        if self.handle is None or len(self.samples) != 3:
            self._free()
            reason = self.reason or "NVML GPM is not usable here"
            return {name: missing("%", method, reason) for name, method in units.items()}
        try:
            start, _, last = self.samples
            self.nvml.nvmlGpmSampleGet(self.handle, last)
            values: dict[str, float | str] = self._values(start, last)
        except Exception as exc:
            values = {name: f"{type(exc).__name__}: {exc}" for name in GPM_METRICS}
        finally:
            self._free()
        out = {}
        for name, method in units.items():
            v = values[name]
            out[name] = (
                metric(v, "%", method, collector=self.name, device_selected_by=self.selected)
                if isinstance(v, float)
                else missing("%", method, f"NVML GPM could not compute it ({v})")
            )
        return out
