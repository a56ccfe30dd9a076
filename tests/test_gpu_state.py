"""The GPU's neighbours and state in the window (tbdkit.agent.collectors.gpu_state) through the real
pynvml wrappers, with only the NVML C library replaced (tests/nvml_shim.py)."""

from __future__ import annotations

import os

import psutil

from tbdkit.agent import disturbance
from tbdkit.agent.collectors.gpu_state import GpuStateCollector
from nvml_shim import Device, fake_nvml  # noqa: F401  (the fixture)

UUID = "GPU-58f4c2a0-0000-0000-0000-000000000001"


def _window(fake_nvml, **device) -> tuple[GpuStateCollector, dict, object]:  # noqa: ANN001
    lib = fake_nvml([Device(UUID, "00000000:18:00.0", **device)])
    c = GpuStateCollector(0, UUID)
    c.start()
    c.sample()
    return c, c.stop(), lib


def test_a_foreign_compute_process_disturbs_and_the_run_own_does_not(fake_nvml):
    neighbour = psutil.Process(os.getppid())  # a real process of this machine outside the run's tree
    c, m, lib = _window(fake_nvml, processes=[(os.getpid(), 3 * 2**30), (neighbour.pid, 5 * 2**30)])
    procs = m["foreign_gpu_processes"]
    assert procs["value"] == 1 and procs["unit"] == "processes"
    (p,) = procs["processes"]
    assert p["pid"] == neighbour.pid and p["used_gpu_memory_mib"] == 5 * 1024 and p["name"] == neighbour.name()
    assert "nvmlDeviceGetComputeRunningProcesses_v3" in lib.calls
    (why,) = disturbance.reasons(m)
    assert why.startswith("foreign GPU processes: 1 other process(es)") and f"pid {neighbour.pid}" in why


def test_only_the_run_on_its_gpu_is_quiet(fake_nvml):
    c, m, _ = _window(fake_nvml, processes=[(os.getpid(), 3 * 2**30)])
    assert m["foreign_gpu_processes"]["value"] == 0
    assert m["gpu_clock_events"]["value"] == 0 and m["gpu_clock_events"]["reasons_seen"] == {}
    assert disturbance.reasons(m) == []


def test_pids_of_another_namespace_set_the_run_aside(fake_nvml):
    """Inside a container NVML lists host PIDs: none exists here, the largest is taken as the run."""
    gone = [p for p in range(4_000_000, 4_000_100) if not psutil.pid_exists(p)][:2]
    _, m, _ = _window(fake_nvml, processes=[(gone[0], 9 * 2**30), (gone[1], 2**30)])
    procs = m["foreign_gpu_processes"]
    assert procs["value"] == 1 and procs["processes"][0]["pid"] == gone[1] and "namespace" in procs["pid_namespace"]


def test_thermal_and_power_clock_events_disturb_idle_does_not(fake_nvml):
    _, m, lib = _window(fake_nvml, clocks_event_reasons=0x20 | 0x4)  # SW thermal slowdown, SW power cap
    events = m["gpu_clock_events"]
    assert events["value"] == 100.0 and set(events["reasons_seen"]) == {"sw_thermal_slowdown", "sw_power_cap"}
    assert "nvmlDeviceGetCurrentClocksEventReasons" in lib.calls
    (why,) = disturbance.reasons(m)
    assert why.startswith("thermal/power throttling")
    _, idle, _ = _window(fake_nvml, clocks_event_reasons=0x1)  # GPU idle: not a disturbance
    assert idle["gpu_clock_events"]["value"] == 0 and disturbance.reasons(idle) == []


def test_an_older_driver_is_read_through_the_older_entry_points(fake_nvml):
    neighbour = psutil.Process(os.getppid())
    _, m, lib = _window(fake_nvml, old_driver=True, clocks_event_reasons=0x40, processes=[(neighbour.pid, 2**30)])
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in lib.calls
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in lib.calls
    assert m["gpu_clock_events"]["reasons_seen"] == {"hw_thermal_slowdown": m["gpu_clock_events"]["reads"]}
    assert m["foreign_gpu_processes"]["value"] == 1


def test_state_at_the_window_start_and_end(fake_nvml):
    c, _, _ = _window(fake_nvml, app_sm_clock=1410, default_app_sm_clock=1980, mig=(1, 1), persistence=0,
                      temperature_c=77, power_limit_mw=350_000)
    start, end = c.states["start"], c.states["end"]
    assert start == end
    assert start["sm_clock_mhz"] == 1980 and start["mem_clock_mhz"] == 2619 and start["temperature_c"] == 77
    assert start["power_limit_w"] == 350.0 and start["persistence_mode"] is False
    assert start["ecc_mode"] == {"current": True, "pending": True} and start["mig_mode"] == {"current": True, "pending": True}
    assert start["applications_clocks_locked"] is True and start["clock_event_reasons"] == []
    assert "errors" not in start


def test_a_failing_query_is_a_gap_never_a_crash(fake_nvml):
    c, m, _ = _window(fake_nvml, fail={"nvmlDeviceGetMigMode": 3, "nvmlDeviceGetComputeRunningProcesses_v3": 999})
    assert c.states["start"]["mig_mode"] is None and "mig_mode" in c.states["start"]["errors"]
    assert m["foreign_gpu_processes"]["value"] is None and "every query failed" in m["foreign_gpu_processes"]["reason"]


def test_on_the_cpu_every_value_says_why(fake_nvml):
    c = GpuStateCollector(None)
    c.start()
    assert c.sample() == {}
    m = c.stop()
    assert m["foreign_gpu_processes"]["value"] is None and "CPU" in m["foreign_gpu_processes"]["reason"]
    assert disturbance.reasons(m) == []


def test_doctor_suggests_locking_floating_clocks_and_says_what_it_means(fake_nvml):
    from tbdkit.env import doctor

    fake_nvml([Device(UUID, "00000000:18:00.0", max_sm_clock=1980)])
    info = doctor.probe_nvml()
    assert info.clocks[0]["locked"] is False and info.clocks[0]["restricted"] is True
    as_user = doctor.clocks_check(info, euid=1000)
    assert as_user.ok is False and "clocks float" in as_user.detail
    assert "needs root" in as_user.fix and "nvidia-smi -lgc 1980,1980" in as_user.fix and "locked runs" in as_user.fix
    as_root = doctor.clocks_check(info, euid=0)
    assert "needs root" not in as_root.fix and "nvidia-smi -rgc" in as_root.fix


def test_doctor_sees_clocks_held_by_application_clocks(fake_nvml):
    from tbdkit.env import doctor

    fake_nvml([Device(UUID, "00000000:18:00.0", app_sm_clock=1410, default_app_sm_clock=1980)])
    check = doctor.clocks_check(doctor.probe_nvml())
    assert check.ok is True and "comparable" in check.detail
    fake_nvml([Device(UUID, "00000000:18:00.0", clocks_event_reasons=0x2)])  # held by nvidia-smi -lgc / -ac
    assert doctor.clocks_check(doctor.probe_nvml()).ok is True
