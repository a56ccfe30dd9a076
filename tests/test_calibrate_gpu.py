"""The GPU probes' arithmetic on constructed values (labelled so), and their device code through the
real pynvml over a stand-in libnvidia-ml (tests/nvml_shim.py): this machine has no GPU."""

from __future__ import annotations

import time

from nvml_shim import Device, fake_nvml  # noqa: F401  (fixture)
from tbdkit.calibrate import gpu


def test_duty_cycle_arithmetic_on_constructed_samples():
    constructed = [100, 0] * 20  # busy 50 ms / idle 50 ms at a 50 ms sample period
    r = gpu.utilization_result("constructed duty cycle", 50.0, constructed, 50.0, 2.0)
    assert r.status == "trusted" and r.details["buffer_coverage"] == 1.0
    biased = [min(100, 2 * v) for v in constructed]  # an NVML reporting any activity as 100%
    assert gpu.utilization_result("constructed", 50.0, [100] * 40, 50.0, 2.0).status == "off"
    assert gpu.utilization_result("constructed", 50.0, biased, 50.0, 2.0).status == "trusted"  # 100/0 stays 50%
    assert gpu.utilization_result("constructed", 0.0, [], None, 2.0).status == "unsupported"


def test_energy_arithmetic_on_constructed_readings():
    assert gpu.energy_result([0, 600_000], 2.0, 70.0, 700.0).status == "trusted"  # 300 W
    assert gpu.energy_result([5, 5], 2.0, 70.0, 700.0).status == "off"            # a stale counter
    assert gpu.energy_result([9, 5], 2.0, 70.0, 700.0).status == "off"            # went backwards
    assert gpu.energy_result([0, 4_000_000], 2.0, 70.0, 700.0).status == "off"    # 2000 W > limit
    assert gpu.energy_result([None, None], 2.0, 70.0, 700.0).status == "unsupported"  # never 0


def test_clock_throttle_reasons_on_constructed_masks():
    assert gpu.clocks_result([1980, 1980], 1980, [0x1]).status == "trusted"  # idle is not throttling
    r = gpu.clocks_result([1400], 1980, [0x40 | 0x4])
    assert r.status == "off" and r.details["throttled"] == ["software power cap", "hardware thermal slowdown"]


def test_probe_reads_nvml_through_the_real_wrappers(fake_nvml):
    dev = Device("GPU-58f4c2a0-0000-0000-0000-000000000001", "00000000:18:00.0", period_us=20_000,
                 sample_value=100, power_mw=300_000)
    fake_nvml([dev])
    results = {(r.instrument, r.expected): r for r in gpu.probe(0, quick=True, spin=lambda s: time.sleep(s))}
    assert results[("nvml.gpu_utilization", 100.0)].status == "trusted"
    assert 15 <= results[("nvml.gpu_utilization", 100.0)].details["sample_period_ms"] <= 25
    energy = next(r for k, r in results.items() if k[0] == "nvml.energy")
    assert energy.status == "trusted" and abs(energy.measured - 300.0) < 15
    assert next(r for k, r in results.items() if k[0] == "nvml.sm_clock").status == "trusted"
    # the stand-in keeps reporting 100% when idle: the idle probe must say so
    assert results[("nvml.gpu_utilization", 0.0)].status == "off"
    assert results[("nvml.gpu_utilization", 50.0)].status == "off"  # and the duty-cycle probe too


def test_probe_names_throttling_and_a_missing_energy_counter(fake_nvml):
    import pynvml

    dev = Device("GPU-58f4c2a0-0000-0000-0000-000000000001", "00000000:18:00.0", clocks_event_reasons=0x20,
                 fail={"nvmlDeviceGetTotalEnergyConsumption": pynvml.NVML_ERROR_NOT_SUPPORTED})
    fake_nvml([dev])
    results = {r.instrument: r for r in gpu.probe(0, quick=True, spin=lambda s: time.sleep(s))}
    assert results["nvml.sm_clock"].status == "off" and "thermal" in results["nvml.sm_clock"].verdict
    assert results["nvml.energy"].status == "unsupported"


def test_probe_reads_the_frameworks_gpu_not_nvmls_index(fake_nvml):
    """CUDA's cuda:0 is NVML's device 1 here (CUDA numbers fastest first): the probe finds it by UUID."""
    other = Device("GPU-00000000-0000-0000-0000-0000000000aa", "00000000:01:00.0", sample_value=0)
    mine = Device("GPU-58f4c2a0-0000-0000-0000-000000000001", "00000000:18:00.0", sample_value=100)
    fake_nvml([other, mine])
    results = gpu.probe(0, quick=True, spin=lambda s: time.sleep(s), uuid="58f4c2a0-0000-0000-0000-000000000001")
    busy = next(r for r in results if r.instrument == "nvml.gpu_utilization" and r.expected == 100.0)
    assert busy.status == "trusted" and busy.measured == 100
    # two GPUs and nothing that names the framework's: unsupported with the reason, never NVML's index 0
    (gap,) = gpu.probe(0, quick=True, spin=lambda s: time.sleep(s))
    assert gap.status == "unsupported" and "NVML device" in gap.verdict
