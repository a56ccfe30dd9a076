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


def _spinner(dev: Device):
    """A busy stretch of the stand-in GPU: NVML's samples (tests/nvml_shim.py) see it as a kernel."""

    def spin(seconds: float) -> None:
        start = time.time()
        time.sleep(seconds)
        dev.busy.append((start, time.time()))

    return spin


def test_a_window_reads_only_the_samples_whose_whole_period_lies_in_it(fake_nvml):
    """NVML stamps a sample at the end of the period it describes, so the first sample stamped inside a
    window covers time before it. An H200's calibrate read 82% for a 1 s busy kernel and 7.4% for the
    idle second after it (tests/fixtures/h200-calibration/calibration.json): that sample, averaged in.
    Here the stand-in's samples are its busy shares over a 200 ms period, as the H200's."""
    dev = Device("GPU-58f4c2a0-0000-0000-0000-000000000001", "00000000:18:00.0", period_us=200_000, busy=[])
    fake_nvml([dev])
    time.sleep(0.45)  # the driver's buffer holds samples before the probe starts, as on a running machine
    results = {(r.instrument, r.expected): r for r in gpu.probe(0, quick=True, spin=_spinner(dev))}
    busy, idle = results[("nvml.gpu_utilization", 100.0)], results[("nvml.gpu_utilization", 0.0)]
    duty = results[("nvml.gpu_utilization", 50.0)]
    # nothing ran in the idle second: its whole samples read 0, where the one stamped first took in the busy tail
    assert idle.measured == 0 and idle.details["samples"] >= gpu.WHOLE_PERIODS, idle
    # the busy stretches leave gaps of the loop's own time between them, longer on a loaded machine
    assert busy.measured >= 95 and busy.details["samples"] >= gpu.WHOLE_PERIODS, busy
    assert 190 <= duty.details["sample_period_ms"] <= 210, duty
    assert {busy.status, idle.status, duty.status} == {"trusted"}


def test_a_window_lasts_long_enough_for_nvmls_sample_period(fake_nvml):
    """A GPU that samples utilization once a second (some do) still gets whole samples in a quick window."""
    dev = Device("GPU-58f4c2a0-0000-0000-0000-000000000001", "00000000:18:00.0", period_us=400_000, busy=[])
    fake_nvml([dev])
    time.sleep(0.85)
    nv = gpu.Nvml(0)
    try:
        samples, period, seconds = gpu.duty_window(nv, _spinner(dev), 1.0, 0.5)
    finally:
        nv.close()
    assert seconds >= (gpu.WHOLE_PERIODS + 1) * 0.4 and len(samples) >= gpu.WHOLE_PERIODS
    assert min(samples) >= 90 and 390 <= period <= 410


def test_the_kernel_timeline_is_held_against_nvml_over_the_duty_cycle_alone(fake_nvml):
    """The profiler's start-up and its trace's processing take seconds on a GPU, idle ones: an H200's
    calibrate held a 49.7% kernel timeline against NVML's 12.6%, the mean of 23 samples over 4.6 s that
    took in both. The stand-in profiler here takes 0.6 s to start and to finish, and reports the
    stand-in GPU's busy stretches inside its span as kernels."""
    from contextlib import contextmanager

    from tbdkit.analysis.timeline import Kernel
    from tbdkit.calibrate import trace

    dev = Device("GPU-58f4c2a0-0000-0000-0000-000000000001", "00000000:18:00.0", period_us=200_000, busy=[])
    fake_nvml([dev])
    time.sleep(0.45)

    @contextmanager
    def slow_profiler():
        time.sleep(0.6)
        start, got = time.time(), {}
        yield got
        end = time.time()
        got["kernels"] = [Kernel("spin", (a - start) * 1e6, (b - a) * 1e6) for a, b in dev.busy if a >= start]
        got["elapsed_us"] = (end - start) * 1e6
        time.sleep(0.6)

    r = trace.probe(0, quick=True, spin=_spinner(dev), tracer=slow_profiler)
    # over the profiler's 1.2 s besides, NVML's mean would be about a third lower (here near 23%)
    assert r.status == "trusted" and r.expected >= 40 and abs(r.measured - 50) <= 10, r
