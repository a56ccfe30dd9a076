"""The NVML GPM collector through the real pynvml module over a stand-in NVML library
(tests/nvml_shim.py): the window's values come from the first and last GPM sample, rows from
consecutive ones; unsupported GPUs and the CPU give null with the reason."""

from __future__ import annotations

import pynvml
import pytest

from nvml_shim import Device, fake_nvml  # noqa: F401  (fixture)
from tbdkit.agent.collectors.gpm import GPM_METRICS, GpmCollector

H100 = Device("GPU-58f4c2a0-0000-0000-0000-000000000001", "00000000:18:00.0")


def test_window_values_span_first_to_last_sample(fake_nvml) -> None:
    lib = fake_nvml([Device("GPU-other", "00000000:01:00.0"), H100])
    c = GpmCollector(0, uuid="58f4c2a0-0000-0000-0000-000000000001")  # CUDA's 0 is NVML's 1
    assert "58f4c2a0" in c.selected
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
    assert len(lib.freed) == 3 and lib.calls.count("nvmlGpmSampleGet") == 5


@pytest.mark.parametrize("devices, uuid, words", [
    (None, None, "CPU"),
    ([Device(H100.uuid, H100.pci_bus_id, gpm=False)], H100.uuid, "does not support NVML GPM"),
    ([Device("GPU-a", "00000000:01:00.0"), H100], None, "could not be matched"),
])
def test_unmeasurable_gives_null_with_reason(fake_nvml, devices, uuid, words) -> None:
    if devices is not None:
        fake_nvml(devices)
    c = GpmCollector(None if devices is None else 0, uuid=uuid)
    c.start()
    assert c.sample() == {}
    out = c.stop()
    assert set(out) == set(GPM_METRICS)
    assert all(m["value"] is None and words in m["reason"] for m in out.values())


def test_every_gpm_sample_is_freed_when_the_window_s_first_sample_fails(fake_nvml) -> None:
    """nvmlGpmSampleGet failing at the window's start (a GPU reset, a MIG reconfiguration) leaves the metrics
    null with the NVML error, and the three samples already allocated go back to the driver."""
    lib = fake_nvml([Device(H100.uuid, H100.pci_bus_id, fail={"nvmlGpmSampleGet": pynvml.NVML_ERROR_UNKNOWN})])
    c = GpmCollector(0, uuid=H100.uuid)
    c.start()
    assert c.sample() == {}
    out = c.stop()
    assert all(m["value"] is None and "NVML GPM sampling failed" in m["reason"] for m in out.values())
    assert len(lib.allocated) == 3 and lib.live_samples == []


def test_samples_allocated_before_an_allocation_fails_are_freed(fake_nvml) -> None:
    lib = fake_nvml([H100])
    lib.alloc_limit = 2  # the third nvmlGpmSampleAlloc answers NVML_ERROR_MEMORY
    c = GpmCollector(0, uuid=H100.uuid)
    c.start()
    out = c.stop()
    assert all(m["value"] is None and "Insufficient Memory" in m["reason"] for m in out.values())
    assert len(lib.allocated) == 2 and lib.live_samples == []


def test_a_window_that_ends_normally_leaves_no_live_sample(fake_nvml) -> None:
    lib = fake_nvml([H100])
    c = GpmCollector(0, uuid=H100.uuid)
    c.start()
    c.sample()
    c.stop()
    c.stop()  # a second stop (a collector stopped twice on an error path) frees nothing twice
    assert len(lib.allocated) == 3 and lib.live_samples == [] and len(lib.freed) == 3
