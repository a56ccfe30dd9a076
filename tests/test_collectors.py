"""Collectors: the CPU collector on this machine, and the NVML collector through the real pynvml
module over a stand-in NVML library (tests/nvml_shim.py: this machine has no GPU), including
every way it reports null with a reason."""

from __future__ import annotations

import time

import pytest

from tbdkit.agent.collectors import Sampler
from tbdkit.agent.collectors.cpu import CpuCollector
from tbdkit.agent.collectors.nvml import NvmlCollector, coverage
from nvml_shim import Device, fake_nvml  # noqa: F401  (fixture)

import pynvml


def test_cpu_collector_sees_a_busy_core():
    # The spin gets one core only when the machine is otherwise idle, so the process figure is
    # checked against this process's own CPU clock over the same window, not against 1.0.
    c = CpuCollector()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    c.start()
    end = time.perf_counter() + 0.6
    while time.perf_counter() < end:
        pass
    m = c.stop()
    own_cores_busy = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    util, proc = m["cpu_utilization"], m["process_cpu_utilization"]
    assert util["unit"] == "%" and f"{c.cores} logical cores" in util["method"]
    assert 100 / c.cores * 0.7 * min(1.0, own_cores_busy / 0.9) <= util["value"] <= 100.0
    assert proc["cores_busy"] == pytest.approx(own_cores_busy, abs=0.15)
    assert own_cores_busy > 0.1
    assert m["peak_rss"]["value"] > 10


A = Device("GPU-aaaaaaaa-0000-0000-0000-000000000000", "00000000:18:00.0", util=10, sample_value=10)
B = Device("GPU-bbbbbbbb-0000-0000-0000-000000000000", "00000000:3B:00.0", util=55, sample_value=90)


def run_window(collector, seconds=0.3, interval_s=0.03):
    sampler = Sampler([collector], interval_s=interval_s)
    sampler.start()
    time.sleep(seconds)
    return sampler, sampler.stop()


def test_nvml_measures_the_gpu_the_framework_names_not_nvml_index(fake_nvml):
    # CUDA's cuda:0 is NVML's second GPU here (fastest first / CUDA_VISIBLE_DEVICES): by UUID, and by PCI bus id.
    fake_nvml([A, B])
    for c in (NvmlCollector(0, uuid="bbbbbbbb-0000-0000-0000-000000000000"), NvmlCollector(0, pci_bus_id=B.pci_bus_id)):
        sampler, m = run_window(c)
        assert m["gpu_utilization"]["value"] == 90.0 and "nvmlDeviceGetSamples" in m["gpu_utilization"]["method"]
        assert sampler.rows[0]["gpu_util_percent"] == 55 and sampler.rows[0]["gpu_power_w"] == 250.0
        assert m["gpu_memory_used_peak"]["value"] == 3072.0
        assert B.pci_bus_id in m["gpu_utilization"]["device_selected_by"] or "bbbbbbbb" in m["gpu_utilization"]["device_selected_by"]


def test_nvml_refuses_to_guess_by_index_among_several_gpus(fake_nvml):
    fake_nvml([A, B])
    m = NvmlCollector(0).stop()
    assert m["gpu_utilization"]["value"] is None and "could not be matched" in m["gpu_utilization"]["reason"]
    fake_nvml([A])
    assert NvmlCollector(0).selected == "the only NVML device"


def test_nvml_drains_the_driver_buffer_and_reports_window_coverage(fake_nvml):
    # The driver keeps 5 samples (50 ms); a 0.4 s window read once at its end would keep an eighth of it.
    dev = Device(A.uuid, A.pci_bus_id, buffer=5, period_us=10_000)
    fake_nvml([dev])
    _, m = run_window(NvmlCollector(0, uuid=dev.uuid), seconds=0.4, interval_s=0.02)
    util = m["gpu_utilization"]
    assert util["coverage"] >= 0.95 and util["samples"] >= 25 and "note" not in util
    assert 0 <= util["first_sample_s"] < 0.05 and util["window_s"] - 0.05 < util["last_sample_s"] <= util["window_s"]
    # polled too seldom (no tick inside the window): the summary says how little the samples cover
    _, m = run_window(NvmlCollector(0, uuid=dev.uuid), seconds=0.4, interval_s=5)
    util = m["gpu_utilization"]
    assert util["coverage"] < 0.3 and "cover only" in util["note"]


def test_nvml_utilization_reads_the_periods_wholly_inside_the_window(fake_nvml):
    """The driver stamps a sample at the end of the period it describes: the first sample stamped in the
    window covers time before it. A GPU idle until the window starts and busy through it reads 100%.
    (The stand-in's samples are the busy share of their period; tests/nvml_shim.py.)"""
    dev = Device(A.uuid, A.pci_bus_id, period_us=100_000, busy=[])
    fake_nvml([dev])
    time.sleep(0.25)  # idle before the window
    dev.busy.append((time.time(), time.time() + 60))
    _, m = run_window(NvmlCollector(0, uuid=dev.uuid), seconds=0.6, interval_s=0.05)
    util = m["gpu_utilization"]
    assert util["value"] == 100.0 and util["samples"] >= 4, util


def test_coverage_arithmetic():
    s = 1_000_000
    assert coverage([int(s * k / 10) for k in range(11)], 0, s) == {
        "first_sample_s": 0.0, "last_sample_s": 1.0, "coverage": 1.0, "gaps": 0}
    half = coverage([int(s * k / 10) for k in range(6)], 0, s)  # nothing after 0.5 s
    assert half["coverage"] == 0.5 and half["gaps"] == 1
    assert coverage([], 0, s)["coverage"] == 0.0


def test_nvml_error_in_a_sample_does_not_kill_the_sampler(fake_nvml):
    # A MIG slice answers NOT_SUPPORTED to utilization queries: memory is still measured, utilization
    # goes null with the NVML error, and the other collectors' columns keep coming.
    dev = Device(A.uuid, A.pci_bus_id, fail={"nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_NOT_SUPPORTED,
                                               "nvmlDeviceGetSamples": pynvml.NVML_ERROR_NOT_SUPPORTED})
    fake_nvml([dev])

    class Other:
        name = "other"
        def start(self): pass
        def sample(self): return {"other": 1}
        def stop(self): return {}

    sampler = Sampler([NvmlCollector(0, uuid=dev.uuid), Other()], interval_s=0.03)
    sampler.start()
    time.sleep(0.25)
    m = sampler.stop()
    assert len(sampler.rows) >= 3 and all(r["other"] == 1 and "gpu_mem_used_mib" in r for r in sampler.rows)
    assert m["gpu_utilization"]["value"] is None and "Not Supported" in m["gpu_utilization"]["reason"]
    assert m["gpu_memory_used_peak"]["value"] == 3072.0


def test_nvml_null_with_reason(fake_nvml):
    cpu = NvmlCollector(None).stop()
    assert cpu["gpu_utilization"]["value"] is None and "CPU" in cpu["gpu_utilization"]["reason"]
    fake_nvml(missing=True)
    broken = NvmlCollector(0)
    broken.start()
    m = broken.stop()
    assert m["gpu_utilization"]["value"] is None and "Library Not Found" in m["gpu_utilization"]["reason"]
    assert m["gpu_memory_used_peak"]["reason"]


def test_a_collector_that_raises_does_not_stop_the_sampler():
    class Broken:
        name = "broken"
        def start(self): pass
        def sample(self): raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        def stop(self): return {}

    cpu = CpuCollector()
    sampler = Sampler([Broken(), cpu], interval_s=0.03)
    sampler.start()
    time.sleep(0.2)
    sampler.stop()
    assert len(sampler.rows) >= 3 and all("rss_mib" in r for r in sampler.rows)
    assert "GPU_IS_LOST" in sampler.errors["broken"]


def test_peak_gpu_memory_leaves_out_the_driver_s_reserve(fake_nvml):
    """nvmlDeviceGetMemoryInfo (v1) counts the driver's reserve (about 0.5 GiB on an H100) as used; the peak is
    what processes allocated (nvmlMemory_v2_t.used), and the reserve is reported beside it."""
    dev = Device(A.uuid, A.pci_bus_id, used_bytes=3 * 2**30, reserved_bytes=512 * 2**20)
    lib = fake_nvml([dev])
    sampler, m = run_window(NvmlCollector(0, uuid=dev.uuid))
    peak = m["gpu_memory_used_peak"]
    assert peak["value"] == 3072.0 and peak["driver_reserved_mib"] == 512.0
    assert "nvmlDeviceGetMemoryInfo_v2" in peak["method"] and "reserve" in peak["method"]
    assert sampler.rows[0]["gpu_mem_used_mib"] == 3072.0 and sampler.rows[0]["gpu_mem_reserved_mib"] == 512.0
    assert "nvmlDeviceGetMemoryInfo_v2" in lib.calls


def test_peak_gpu_memory_on_a_driver_without_the_v2_query_says_it_holds_the_reserve(fake_nvml):
    dev = Device(A.uuid, A.pci_bus_id, used_bytes=3 * 2**30, reserved_bytes=512 * 2**20)
    lib = fake_nvml([dev])
    delattr(lib, "nvmlDeviceGetMemoryInfo_v2")  # an NVML library older than the _v2 entry point
    _, m = run_window(NvmlCollector(0, uuid=dev.uuid))
    peak = m["gpu_memory_used_peak"]
    assert peak["value"] == 3584.0 and peak["driver_reserved_mib"] is None
    assert "includes the driver's reserve" in peak["note"] and "Function Not Found" in peak["note"]
