"""The NVML GPM collector against a fake NVML that keeps pynvml's real structures: the window's
values come from the first and last GPM sample, rows from consecutive ones; unsupported GPUs
and the CPU give null with the reason."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pynvml
import pytest

from tbdkit.agent.collectors.gpm import GPM_METRICS, GpmCollector


class FakeGpm:
    """Each GPM sample reads a counter that grows by 1 per read; metric id k between two samples
    is k * (difference of their readings), so every value says which samples it came from."""

    def __init__(self, supported: bool = True) -> None:
        self.supported = supported
        self.reads = 0
        self.reading: dict[int, int] = {}
        self.next_addr = 0x1000
        self.freed: list[int] = []
        for name in ("c_nvmlGpmMetricsGet_t", "NVML_GPM_METRICS_GET_VERSION", *GPM_METRICS.values()):
            setattr(self, name, getattr(pynvml, name))

    @staticmethod
    def addr(sample: object) -> int:
        return ctypes.cast(sample, ctypes.c_void_p).value

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"gpu{i}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpmQueryDeviceSupport(self, handle: str) -> SimpleNamespace:
        return SimpleNamespace(isSupportedDevice=int(self.supported))

    def nvmlGpmSampleAlloc(self) -> object:
        self.next_addr += 0x100
        return ctypes.cast(ctypes.c_void_p(self.next_addr), pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: object) -> None:
        self.freed.append(self.addr(sample))

    def nvmlGpmSampleGet(self, handle: str, sample: object) -> object:
        self.reads += 1
        self.reading[self.addr(sample)] = self.reads
        return sample

    def nvmlGpmMetricsGet(self, req: object) -> object:
        span = self.reading[self.addr(req.sample2)] - self.reading[self.addr(req.sample1)]
        for i in range(req.numMetrics):
            m = req.metrics[i]
            m.value = float(m.metricId * span)
            m.nvmlReturn = 0 if m.metricId != pynvml.NVML_GPM_METRIC_FP16_UTIL else pynvml.NVML_ERROR_NOT_SUPPORTED
        return req


def test_window_values_span_first_to_last_sample() -> None:
    fake = FakeGpm()
    c = GpmCollector(0, nvml=fake)
    c.start()                       # readings 1 (window start) and 2 (previous)
    rows = [c.sample(), c.sample()]  # readings 3, 4: each row spans one tick
    out = c.stop()                  # reading 5: the window spans 5 - 1 = 4
    assert rows[0]["gpm_sm_activity_percent"] == pynvml.NVML_GPM_METRIC_SM_UTIL * 1
    assert rows[1]["gpm_tensor_pipe_percent"] == pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL * 1
    assert out["gpm_sm_activity"]["value"] == pynvml.NVML_GPM_METRIC_SM_UTIL * 4
    assert out["gpm_dram_bandwidth"]["value"] == pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL * 4
    assert out["gpm_fp32_pipe"]["unit"] == "%" and "NVML_GPM_METRIC_FP32_UTIL" in out["gpm_fp32_pipe"]["method"]
    fp16 = out["gpm_fp16_pipe"]
    assert fp16["value"] is None and "NVML error" in fp16["reason"]
    assert len(fake.freed) == 3


@pytest.mark.parametrize("make, words", [
    (lambda: GpmCollector(None), "CPU"),
    (lambda: GpmCollector(0, nvml=FakeGpm(supported=False)), "does not support NVML GPM"),
])
def test_unmeasurable_gives_null_with_reason(make, words) -> None:
    c = make()
    c.start()
    assert c.sample() == {}
    out = c.stop()
    assert set(out) == set(GPM_METRICS)
    assert all(m["value"] is None and words in m["reason"] for m in out.values())
