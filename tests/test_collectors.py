"""Collectors: the CPU collector on this machine, and the NVML collector against a fake NVML
(this machine has no GPU), including every way it reports null with a reason."""

from __future__ import annotations

import sys
import time
import types

import pytest

from tbdkit.agent.collectors import Sampler
from tbdkit.agent.collectors.cpu import CpuCollector
from tbdkit.agent.collectors.nvml import NvmlCollector


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


def fake_pynvml(samples, util=55, fail_init=False, fail_samples=False):
    mod = types.ModuleType("pynvml")
    mod.NVML_GPU_UTILIZATION_SAMPLES = 1
    mod.NVML_CLOCK_SM = 1
    mod.calls = []

    def init():
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")
    mod.nvmlInit = init
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("idx", i)
    mod.nvmlDeviceGetHandleByUUID = lambda u: ("uuid", u)
    mod.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=util, memory=20)
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=3 * 2**30, total=80 * 2**30)
    mod.nvmlDeviceGetPowerUsage = lambda h: 250_000
    mod.nvmlDeviceGetClockInfo = lambda h, c: 1980

    def get_samples(h, kind, since):
        mod.calls.append((h, since))
        if fail_samples:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        now = int(time.time() * 1e6)
        return 0, [types.SimpleNamespace(timeStamp=t(now, since), sampleValue=types.SimpleNamespace(uiVal=v))
                   for t, v in samples]
    mod.nvmlDeviceGetSamples = get_samples
    return mod


def test_nvml_uses_driver_samples_inside_the_window(monkeypatch):
    inside = lambda now, since: since + 1000  # noqa: E731
    before = lambda now, since: since - 10  # noqa: E731
    fake = fake_pynvml([(before, 0), (inside, 90), (inside, 100)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    c = NvmlCollector(0, uuid="58f4c2a0-aaaa")
    assert c.handle == ("uuid", "GPU-58f4c2a0-aaaa")
    sampler = Sampler([c], interval_s=0.05)
    sampler.start()
    time.sleep(0.2)
    m = sampler.stop()
    assert m["gpu_utilization"]["value"] == 95.0 and m["gpu_utilization"]["samples"] == 2
    assert "nvmlDeviceGetSamples" in m["gpu_utilization"]["method"]
    assert m["gpu_memory_used_peak"]["value"] == 3072.0
    assert sampler.rows and sampler.rows[0]["gpu_util_percent"] == 55 and sampler.rows[0]["gpu_power_w"] == 250.0


def test_nvml_falls_back_to_polled_utilization(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], util=40, fail_samples=True))
    c = NvmlCollector(1)
    assert c.handle == ("idx", 1)
    sampler = Sampler([c], interval_s=0.05)
    sampler.start()
    time.sleep(0.2)
    util = sampler.stop()["gpu_utilization"]
    assert util["value"] == 40.0 and "polled" in util["method"]


def test_nvml_null_with_reason(monkeypatch):
    cpu = NvmlCollector(None).stop()
    assert cpu["gpu_utilization"]["value"] is None and "CPU" in cpu["gpu_utilization"]["reason"]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], fail_init=True))
    broken = NvmlCollector(0)
    broken.start()
    m = broken.stop()
    assert m["gpu_utilization"]["value"] is None and "NVML Shared Library Not Found" in m["gpu_utilization"]["reason"]
    assert m["gpu_memory_used_peak"]["reason"]
