"""The run's GPU during the sample window: other processes on it, clock-event (throttle) reasons,
and its state at the window's start and end (clocks, temperature, power limit, persistence, ECC,
MIG, application clocks), all from NVML.

Other processes: nvmlDeviceGetComputeRunningProcesses (pynvml calls the _v3 entry point; a driver
older than that has _v2) at start, at every sampler tick and at the end; a PID outside the run's
process tree (the launcher's, else the agent's: neighbours.run_root) is foreign. Inside a container
NVML reports the host's PIDs, which this process cannot see: when none of the listed PIDs exists
here, the one holding the most memory is taken as the run itself and the rest count as foreign
(`pid_namespace` says so).

Clock events: nvmlDeviceGetCurrentClocksEventReasons (drivers before 535 name it
...ClocksThrottleReasons: used when the new entry point is missing) at every tick; the bits seen
are OR-ed and counted per sample.
"""

from __future__ import annotations

import os
from typing import Any

import psutil

from tbdkit.agent.collectors.neighbours import run_root, tree
from tbdkit.core.metric import metric, missing
from tbdkit.env.nvml import nvml_handle

PROC_METHOD = (
    "NVML nvmlDeviceGetComputeRunningProcesses at the window's start, every sampler tick and its end: "
    "processes on the run's GPU outside the run's process tree (collectors/neighbours.py: run_root)"
)
EVENT_METHOD = (
    "NVML nvmlDeviceGetCurrentClocksEventReasons at every sampler tick and the window's ends: share of "
    "reads with a thermal or power clock-event reason set"
)

# nvmlClocksEventReason* bits (pynvml), by what they mean for a measurement.
EVENT_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THERMAL = {"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"}  # HW slowdown: thermal or power brake
POWER = {"sw_power_cap", "hw_power_brake_slowdown"}
DISTURBING = THERMAL | POWER


def event_names(bits: int) -> list[str]:
    return [name for bit, name in EVENT_BITS.items() if bits & bit]


class GpuStateCollector:
    name = "gpu_state"
    foreign: dict[int, dict[str, Any]]  # pid -> the most GPU memory it held in the window
    events: dict[str, int]  # clock-event reason -> reads that had it
    errors: dict[str, str]
    namespace_note: str | None

    def __init__(self, cuda_index: int | None, uuid: str | None = None, pci_bus_id: str | None = None) -> None:
        self.handle: Any = None
        self.reason: str | None = None
        self.states: dict[str, Any] = {}
        self.proc = run_root()
        self._reset()
        if cuda_index is None:
            self.reason = "the run is on the CPU: there is no GPU to watch"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle, _ = nvml_handle(pynvml, cuda_index, uuid, pci_bus_id)
        except Exception as exc:  # NVML missing or failing is a measurement gap, never a crash
            self.reason = f"NVML is not usable here ({type(exc).__name__}: {exc})"
            self.handle = None

    # -- queries, each allowed to fail alone ------------------------------------------------------

    def _try(self, fn: Any, *args: Any) -> tuple[Any, str | None]:
        try:
            return fn(*args), None
        except Exception as exc:
            return None, f"{type(exc).__name__}: {exc}"

    def _versioned(self, name: str, older: str) -> Any:
        """The pynvml wrapper `name`, or `older` where this driver lacks the newer entry point."""
        n = self.nvml
        try:
            return getattr(n, name)(self.handle)
        except (n.NVMLError_FunctionNotFound, getattr(n, "NVMLLibraryMismatchError", n.NVMLError_FunctionNotFound)):
            return getattr(n, older)(self.handle)

    def processes(self) -> list[dict[str, Any]]:
        got = self._versioned("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2")
        return [
            {
                "pid": int(p.pid),
                "used_gpu_memory_mib": None if p.usedGpuMemory is None else round(p.usedGpuMemory / 2**20, 1),
            }
            for p in got
        ]

    def event_reasons(self) -> int:
        return int(
            self._versioned("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
        )

    def snapshot(self) -> dict[str, Any]:
        """The GPU's state now: every value, or None with its error under `errors`."""
        n, h = self.nvml, self.handle
        state: dict[str, Any] = {}
        errors: dict[str, str] = {}
        queries: dict[str, tuple[Any, ...]] = {
            "sm_clock_mhz": (n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
            "mem_clock_mhz": (n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
            "temperature_c": (n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
            "power_limit_w": (n.nvmlDeviceGetPowerManagementLimit, h),
            "persistence_mode": (n.nvmlDeviceGetPersistenceMode, h),
            "ecc_mode": (n.nvmlDeviceGetEccMode, h),
            "mig_mode": (n.nvmlDeviceGetMigMode, h),
            "applications_sm_clock_mhz": (n.nvmlDeviceGetApplicationsClock, h, n.NVML_CLOCK_SM),
            "default_applications_sm_clock_mhz": (n.nvmlDeviceGetDefaultApplicationsClock, h, n.NVML_CLOCK_SM),
        }
        for key, (fn, *args) in queries.items():
            value, err = self._try(fn, *args)
            if err:
                errors[key] = err
            state[key] = value
        if state["power_limit_w"] is not None:
            state["power_limit_w"] = state["power_limit_w"] / 1000.0
        for key in ("ecc_mode", "mig_mode"):  # [current, pending]
            state[key] = (
                None if state[key] is None else {"current": bool(state[key][0]), "pending": bool(state[key][1])}
            )
        if state["persistence_mode"] is not None:
            state["persistence_mode"] = state["persistence_mode"] == n.NVML_FEATURE_ENABLED
        app, default = state["applications_sm_clock_mhz"], state["default_applications_sm_clock_mhz"]
        state["applications_clocks_locked"] = None if app is None or default is None else app != default
        reasons, err = self._try(self.event_reasons)
        state["clock_event_reasons"] = None if reasons is None else event_names(reasons)
        if err:
            errors["clock_event_reasons"] = err
        if errors:
            state["errors"] = errors
        return state

    # -- the collector ----------------------------------------------------------------------------

    def _own_pids(self) -> set[int]:
        return {p.pid for p in tree(self.proc)}

    def _watch(self) -> None:
        procs, err = self._try(self.processes)
        if err:
            self.errors.setdefault("processes", err)
        else:
            self.process_reads += 1
            own = self._own_pids()
            if procs and not any(p["pid"] in own or psutil.pid_exists(p["pid"]) for p in procs):
                # no listed PID exists here: they are another PID namespace's (a container's host)
                self.namespace_note = (
                    "NVML listed no PID of the run's own process tree (another PID namespace, "
                    "e.g. inside a container): one listed process is taken as the run's"
                )
                procs = sorted(procs, key=lambda p: -(p["used_gpu_memory_mib"] or 0))[1:]
            for p in procs:
                if p["pid"] not in own:
                    seen = self.foreign.setdefault(p["pid"], p)
                    seen["used_gpu_memory_mib"] = max(seen["used_gpu_memory_mib"] or 0, p["used_gpu_memory_mib"] or 0)
        bits, err = self._try(self.event_reasons)
        if err:
            self.errors.setdefault("clock_event_reasons", err)
        else:
            self.event_reads += 1
            for name in event_names(bits):
                self.events[name] = self.events.get(name, 0) + 1
            if set(event_names(bits)) & DISTURBING:
                self.disturbed_reads += 1

    def _reset(self) -> None:
        self.foreign = {}
        self.events = {}
        self.errors = {}
        self.process_reads = self.event_reads = self.disturbed_reads = 0
        self.namespace_note = None

    def start(self) -> None:
        self._reset()
        if self.handle is None:
            return
        self.states = {"start": self.snapshot()}
        self._watch()

    def sample(self) -> dict[str, Any]:
        if self.handle is None:
            return {}
        self._watch()
        return {"gpu_foreign_processes": len(self.foreign)}

    def stop(self) -> dict[str, dict[str, Any]]:
        if self.handle is None:
            reason = self.reason or "NVML is not usable here"
            return {
                "foreign_gpu_processes": missing("processes", PROC_METHOD, reason),
                "gpu_clock_events": missing("%", EVENT_METHOD, reason),
            }
        self._watch()
        self.states["end"] = self.snapshot()
        procs = (
            metric(
                len(self.foreign),
                "processes",
                PROC_METHOD,
                collector=self.name,
                reads=self.process_reads,
                processes=[self._named(p) for p in self.foreign.values()],
                **({"pid_namespace": self.namespace_note} if self.namespace_note else {}),
            )
            if self.process_reads
            else missing("processes", PROC_METHOD, f"every query failed: {self.errors.get('processes')}")
        )
        events = (
            metric(
                100.0 * self.disturbed_reads / self.event_reads,
                "%",
                EVENT_METHOD,
                collector=self.name,
                reads=self.event_reads,
                reasons_seen=dict(self.events),
            )
            if self.event_reads
            else missing("%", EVENT_METHOD, f"every query failed: {self.errors.get('clock_event_reasons')}")
        )
        return {"foreign_gpu_processes": procs, "gpu_clock_events": events}

    @staticmethod
    def _named(p: dict[str, Any]) -> dict[str, Any]:
        try:
            name = psutil.Process(p["pid"]).name()
        except psutil.Error:
            name = None
        return {**p, "name": name, "visible_here": name is not None or os.path.exists(f"/proc/{p['pid']}")}
