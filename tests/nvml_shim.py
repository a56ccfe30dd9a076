"""The real `pynvml` module over a stand-in for the NVML C library (libnvidia-ml.so.1).

Only the library is replaced: pynvml's own wrappers run, build their real ctypes structs and call
the entry points by name through `pynvml.CDLL`; each entry point here is a C-ABI callable (ctypes
CFUNCTYPE) that receives raw pointers and fills the structs at those addresses, the way the driver
does. A renamed function, a wrong argument or a misread struct field fails as it would on a GPU.

A device's utilization samples are made in real time, one per `period_us`, and the driver's ring
buffer keeps only the newest `buffer` of them, as NVML does.
"""

from __future__ import annotations

import ctypes
import time
from ctypes import CFUNCTYPE, POINTER, c_char_p, c_double, c_uint, c_ulonglong, c_void_p, cast
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pynvml
import pytest

RET = c_uint  # nvmlReturn_t
HANDLE_BASE = 0x7E5D_0000


@dataclass
class Device:
    uuid: str
    pci_bus_id: str
    name: str = "NVIDIA H100 80GB HBM3"
    util: int = 55
    mem_util: int = 20
    used_bytes: int = 3 * 2**30   # allocated by processes (what nvmlMemory_v2_t.used counts)
    total_bytes: int = 80 * 2**30
    reserved_bytes: int = 512 * 2**20  # the driver's and firmware's own reserve (about 0.5 GiB on an H100)
    power_mw: int = 250_000
    sm_clock: int = 1980
    max_sm_clock: int = 1980
    period_us: int = 10_000       # one utilization sample per period
    buffer: int = 1000            # samples the driver keeps
    sample_value: int = 90
    gpm: bool = True
    power_limit_mw: int = 700_000
    architecture: int = 9         # nvmlDeviceArchitecture_t: 9 Hopper (Volta 5 and newer have the energy counter)
    clocks_event_reasons: int = 0  # nvmlClocksEventReason* bits
    mem_clock: int = 2619
    temperature_c: int = 41
    persistence: int = 1           # nvmlEnableState_t
    ecc: tuple[int, int] = (1, 1)  # (current, pending)
    mig: tuple[int, int] = (0, 0)  # (current, pending)
    app_sm_clock: int = 1980
    default_app_sm_clock: int = 1980
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, used GPU memory in bytes)
    clocks_restricted: bool = True  # setting application clocks needs root (NVML's default)
    old_driver: bool = False       # before 535: no ...ClocksEventReasons nor ..._v3 entry points
    fail: dict[str, int] = field(default_factory=dict)  # entry point -> the NVML error it returns
    born_us: int = field(default_factory=lambda: int(time.time() * 1e6))
    # When set, the GPU's busy intervals (time.time() seconds, start and end): each utilization sample is
    # then the share of its period, the `period_us` before its stamp, in which one was under way, as NVML's is.
    busy: list[tuple[float, float]] | None = None

    def utilization_at(self, stamp_us: int) -> int:
        if self.busy is None:
            return self.sample_value
        start, end = (stamp_us - self.period_us) / 1e6, stamp_us / 1e6
        covered = sum(max(0.0, min(end, b) - max(start, a)) for a, b in self.busy)
        return int(round(100 * covered / (end - start)))

    def samples_since(self, since_us: int) -> list[int]:
        now = int(time.time() * 1e6)
        first = self.born_us + ((max(since_us, self.born_us) - self.born_us) // self.period_us + 1) * self.period_us
        stamps = list(range(first, now + 1, self.period_us))
        oldest_kept = now - self.buffer * self.period_us
        return [t for t in stamps if t > oldest_kept]


class FakeNvmlLibrary:
    """libnvidia-ml.so.1 for the devices given, in NVML's (PCI bus id) order."""

    def __init__(self, devices: list[Device]) -> None:
        self.devices = devices
        self.calls: list[str] = []
        self.gpm_reads: dict[int, int] = {}   # sample address -> counter reading
        self.gpm_counter = 0
        self.allocated: list[int] = []
        self.freed: list[int] = []
        self.alloc_limit: int | None = None  # nvmlGpmSampleAlloc answers NVML_ERROR_MEMORY past this many
        self._next_sample = 0x5A_0000
        self._keep: list[Any] = []

    @property
    def live_samples(self) -> list[int]:
        """GPM samples allocated and not freed: the driver's memory a collector leaked."""
        return [a for a in self.allocated if a not in self.freed]

    def _dev(self, handle: int) -> Device:
        return self.devices[(handle - HANDLE_BASE) // 0x10]

    def _entry(self, name: str, argtypes: tuple[Any, ...], body: Callable[..., int], device_arg: int | None = 0) -> None:
        def call(*args: Any) -> int:
            self.calls.append(name)
            if device_arg is not None:
                err = self._dev(args[device_arg]).fail.get(name)
                if err:
                    return err
            return body(*args)

        fn = CFUNCTYPE(RET, *argtypes)(call)
        self._keep.append(fn)
        setattr(self, name, fn)

    def build(self) -> "FakeNvmlLibrary":
        P = c_void_p
        out = lambda ptr, ctype, value: setattr(cast(ptr, POINTER(ctype)).contents, "value", value) or 0  # noqa: E731

        def handle_out(ptr: int, i: int) -> int:
            cast(ptr, POINTER(c_void_p))[0] = HANDLE_BASE + 0x10 * i
            return 0

        def by(attr: str) -> Callable[[bytes, int], int]:
            def find(key: bytes, ptr: int) -> int:
                for i, d in enumerate(self.devices):
                    if getattr(d, attr).lower() == key.decode().lower():
                        return handle_out(ptr, i)
                return pynvml.NVML_ERROR_NOT_FOUND
            return find

        def struct(ptr: int, ctype: Any, **values: Any) -> int:
            s = cast(ptr, POINTER(ctype)).contents
            for k, v in values.items():
                setattr(s, k, v)
            return 0

        self._entry("nvmlInitWithFlags", (c_uint,), lambda flags: 0, None)
        self._entry("nvmlShutdown", (), lambda: 0, None)
        self._entry("nvmlDeviceGetCount_v2", (P,), lambda p: out(p, c_uint, len(self.devices)), None)
        self._entry("nvmlDeviceGetHandleByIndex_v2", (c_uint, P),
                    lambda i, p: handle_out(p, i) if i < len(self.devices) else pynvml.NVML_ERROR_INVALID_ARGUMENT, None)
        self._entry("nvmlDeviceGetHandleByUUID", (c_char_p, P), by("uuid"), None)
        self._entry("nvmlDeviceGetHandleByPciBusId_v2", (c_char_p, P), by("pci_bus_id"), None)
        def text(attr: str) -> Callable[[int, int, int], int]:
            def copy(h: int, buf: int, size: int) -> int:
                data = getattr(self._dev(h), attr).encode()
                if len(data) + 1 > size:
                    return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
                ctypes.memmove(buf, data + b"\0", len(data) + 1)
                return 0
            return copy

        self._entry("nvmlDeviceGetUUID", (P, P, c_uint), text("uuid"))
        self._entry("nvmlDeviceGetName", (P, P, c_uint), text("name"))
        self._entry("nvmlDeviceGetUtilizationRates", (P, P), lambda h, p: struct(
            p, pynvml.c_nvmlUtilization_t, gpu=self._dev(h).util, memory=self._dev(h).mem_util))
        # v1 (nvmlMemory_t) counts the driver's reserve as used (used = total - free); v2 (nvmlMemory_v2_t,
        # its version field set to nvmlMemory_v2) reports it apart, and `used` is what processes allocated.
        def memory_v1(h: int, p: int) -> int:
            d = self._dev(h)
            free = d.total_bytes - d.used_bytes - d.reserved_bytes
            return struct(p, pynvml.c_nvmlMemory_t, total=d.total_bytes, used=d.total_bytes - free, free=free)

        def memory_v2(h: int, p: int) -> int:
            d = self._dev(h)
            if cast(p, POINTER(pynvml.c_nvmlMemory_v2_t)).contents.version != pynvml.nvmlMemory_v2:
                return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
            return struct(p, pynvml.c_nvmlMemory_v2_t, total=d.total_bytes, reserved=d.reserved_bytes,
                          used=d.used_bytes, free=d.total_bytes - d.used_bytes - d.reserved_bytes)

        self._entry("nvmlDeviceGetMemoryInfo", (P, P), memory_v1)
        self._entry("nvmlDeviceGetMemoryInfo_v2", (P, P), memory_v2)
        self._entry("nvmlDeviceGetPowerUsage", (P, P), lambda h, p: out(p, c_uint, self._dev(h).power_mw))
        self._entry("nvmlDeviceGetPowerManagementLimit", (P, P),
                    lambda h, p: out(p, c_uint, self._dev(h).power_limit_mw))
        # Energy since the device was born, at its power: millijoules = mW x seconds.
        self._entry("nvmlDeviceGetTotalEnergyConsumption", (P, P), lambda h, p: out(
            p, c_ulonglong, int(self._dev(h).power_mw * (time.time() - self._dev(h).born_us / 1e6))))
        self._entry("nvmlDeviceGetArchitecture", (P, P), lambda h, p: out(p, c_uint, self._dev(h).architecture))
        self._entry("nvmlDeviceGetCurrentClocksEventReasons", (P, P),
                    lambda h, p: out(p, c_ulonglong, self._dev(h).clocks_event_reasons))
        self._entry("nvmlDeviceGetCurrentClocksThrottleReasons", (P, P),
                    lambda h, p: out(p, c_ulonglong, self._dev(h).clocks_event_reasons))
        clock = {pynvml.NVML_CLOCK_SM: "sm_clock", pynvml.NVML_CLOCK_MEM: "mem_clock"}
        self._entry("nvmlDeviceGetClockInfo", (P, c_uint, P),
                    lambda h, kind, p: out(p, c_uint, getattr(self._dev(h), clock[kind])))
        self._entry("nvmlDeviceGetApplicationsClock", (P, c_uint, P), lambda h, kind, p: out(
            p, c_uint, self._dev(h).app_sm_clock if kind == pynvml.NVML_CLOCK_SM else self._dev(h).mem_clock))
        self._entry("nvmlDeviceGetDefaultApplicationsClock", (P, c_uint, P), lambda h, kind, p: out(
            p, c_uint, self._dev(h).default_app_sm_clock if kind == pynvml.NVML_CLOCK_SM else self._dev(h).mem_clock))
        self._entry("nvmlDeviceGetTemperature", (P, c_uint, P),
                    lambda h, sensor, p: out(p, c_uint, self._dev(h).temperature_c)
                    if sensor == pynvml.NVML_TEMPERATURE_GPU else pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._entry("nvmlDeviceGetAPIRestriction", (P, c_uint, P),
                    lambda h, api, p: out(p, c_uint, int(self._dev(h).clocks_restricted)))
        self._entry("nvmlDeviceGetPersistenceMode", (P, P), lambda h, p: out(p, c_uint, self._dev(h).persistence))
        self._entry("nvmlDeviceGetEccMode", (P, P, P), lambda h, cur, pend: out(cur, c_uint, self._dev(h).ecc[0])
                    or out(pend, c_uint, self._dev(h).ecc[1]))
        self._entry("nvmlDeviceGetMigMode", (P, P, P), lambda h, cur, pend: out(cur, c_uint, self._dev(h).mig[0])
                    or out(pend, c_uint, self._dev(h).mig[1]))

        def processes(h: int, count: int, buf: int | None) -> int:
            """NVML's two-call protocol: no buffer (or too small) -> INSUFFICIENT_SIZE with the count."""
            procs = self._dev(h).processes
            n = cast(count, POINTER(c_uint))
            if not procs:
                n.contents.value = 0
                return 0
            if not buf or n.contents.value < len(procs):
                n.contents.value = len(procs)
                return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
            arr = cast(buf, POINTER(pynvml.c_nvmlProcessInfo_v2_t))
            for i, (pid, used) in enumerate(procs):
                arr[i].pid, arr[i].usedGpuMemory, arr[i].gpuInstanceId, arr[i].computeInstanceId = pid, used, 0xFFFFFFFF, 0xFFFFFFFF
            n.contents.value = len(procs)
            return 0

        self._entry("nvmlDeviceGetComputeRunningProcesses_v3", (P, P, P), processes)
        self._entry("nvmlDeviceGetComputeRunningProcesses_v2", (P, P, P), processes)
        self._entry("nvmlDeviceGetMaxClockInfo", (P, c_uint, P),
                    lambda h, kind, p: out(p, c_uint, self._dev(h).max_sm_clock))

        def get_samples(h: int, kind: int, since: int, vtype: int, count: int, buf: int | None) -> int:
            stamps = self._dev(h).samples_since(since)
            if not stamps:
                return pynvml.NVML_ERROR_NOT_FOUND
            n = cast(count, POINTER(c_uint))
            out(vtype, c_uint, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT)
            if not buf:
                n.contents.value = len(stamps)
                return 0
            arr = cast(buf, POINTER(pynvml.c_nvmlSample_t))
            stamps = stamps[: n.contents.value]
            for i, t in enumerate(stamps):
                arr[i].timeStamp = t
                arr[i].sampleValue.uiVal = self._dev(h).utilization_at(t)
            n.contents.value = len(stamps)
            return 0

        self._entry("nvmlDeviceGetSamples", (P, c_uint, c_ulonglong, P, P, P), get_samples)
        self._entry("nvmlGpmQueryDeviceSupport", (P, P), lambda h, p: struct(
            p, pynvml.c_nvmlGpmSupport_t, isSupportedDevice=int(self._dev(h).gpm)))

        def alloc(p: int) -> int:
            if self.alloc_limit is not None and len(self.allocated) >= self.alloc_limit:
                return pynvml.NVML_ERROR_MEMORY
            self._next_sample += 0x100
            cast(p, POINTER(c_void_p))[0] = self._next_sample
            self.allocated.append(self._next_sample)
            return 0

        def sample_get(h: int, sample: int) -> int:
            self.gpm_counter += 1
            self.gpm_reads[sample] = self.gpm_counter
            return 0

        def metrics_get(p: int) -> int:
            """Metric id k between two samples is k x (difference of their counter readings); FP16 is unsupported."""
            req = cast(p, POINTER(pynvml.c_nvmlGpmMetricsGet_t)).contents
            a = self.gpm_reads[cast(req.sample1, c_void_p).value]
            b = self.gpm_reads[cast(req.sample2, c_void_p).value]
            for i in range(req.numMetrics):
                m = req.metrics[i]
                if m.metricId == pynvml.NVML_GPM_METRIC_FP16_UTIL:
                    m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                else:
                    m.nvmlReturn, m.value = 0, c_double(m.metricId * (b - a)).value
            return 0

        self._entry("nvmlGpmSampleAlloc", (P,), alloc, None)
        def free(sample: int) -> int:
            if sample not in self.allocated or sample in self.freed:  # NVML's answer to a bad or freed sample
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            self.freed.append(sample)
            return 0

        self._entry("nvmlGpmSampleFree", (P,), free, None)
        self._entry("nvmlGpmSampleGet", (P, P), sample_get)
        self._entry("nvmlGpmMetricsGet", (P,), metrics_get, None)
        return self


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeNvmlLibrary]]:
    """`fake_nvml(devices)` makes the real pynvml load a FakeNvmlLibrary in place of libnvidia-ml.so.1."""
    def install(devices: list[Device] | None = None, missing: bool = False) -> FakeNvmlLibrary:
        lib = FakeNvmlLibrary(devices if devices is not None else [Device("GPU-58f4c2a0-0000-0000-0000-000000000001",
                                                                            "00000000:18:00.0")]).build()
        if any(d.old_driver for d in lib.devices):  # an older libnvidia-ml.so: these entry points do not exist
            for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetComputeRunningProcesses_v3"):
                delattr(lib, name)

        def cdll(name: str, *args: Any, **kwargs: Any) -> Any:
            assert name == "libnvidia-ml.so.1"
            if missing:
                raise OSError(f"{name}: cannot open shared object file: No such file or directory")
            return lib

        monkeypatch.setattr(pynvml, "CDLL", cdll)
        monkeypatch.setattr(pynvml, "nvmlLib", None)
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        return lib

    yield install
