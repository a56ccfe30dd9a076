"""The NVIDIA GPU probes: NVML utilization against a known duty cycle, the energy counter, and the
SM clock with its throttle reasons. Their arithmetic is plain functions (tested on constructed
values); their device code goes through pynvml (tested through the real pynvml over a stand-in for
libnvidia-ml, tests/nvml_shim.py), and the busy kernel is torch.cuda._sleep (a GPU spin of a given
number of cycles), so the GPU probes run in the PyTorch stack's interpreter (tbdkit.calibrate.stack).
GPM and ncu against FLOP counts: calibrate.flops; the kernel timeline against NVML: calibrate.trace;
the frameworks' GPU memory counters: calibrate.gpu_memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tbdkit.agent.collectors.nvml import sample_period_us, whole_periods
from tbdkit.calibrate.verdict import TRUSTED, ProbeResult, Tolerance, judge, unsupported

UTIL_TOLERANCE = Tolerance(absolute=10.0)  # percentage points: NVML samples a ~10-170 ms period
WHOLE_PERIODS = 3  # a utilization window holds at least this many of NVML's sample periods whole
# Reasons that slow the clocks (nvmlClocksEventReason*): idle, application clocks and sync boost do not.
THROTTLE_REASONS = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def utilization_result(
    probe: str, expected: float, samples: list[int], period_ms: float | None, window_s: float
) -> ProbeResult:
    """NVML's utilization samples over a window of known GPU duty cycle `expected` (%)."""
    details: dict[str, Any] = {"samples": len(samples), "sample_period_ms": period_ms}
    if not samples:
        return ProbeResult(
            "nvml.gpu_utilization",
            probe,
            expected,
            None,
            "%",
            UTIL_TOLERANCE,
            unsupported("NVML returned no utilization sample whose whole period lies in the window"),
            ("gpu_utilization",),
            details,
        )
    if period_ms:
        details["buffer_coverage"] = min(1.0, len(samples) * period_ms / 1e3 / window_s)
    measured = sum(samples) / len(samples)
    return ProbeResult(
        "nvml.gpu_utilization",
        probe,
        expected,
        measured,
        "%",
        UTIL_TOLERANCE,
        judge(expected, measured, UTIL_TOLERANCE, "%"),
        ("gpu_utilization",),
        details,
    )


def energy_result(
    readings_mj: list[int | None], seconds: float, idle_w: float | None, limit_w: float | None
) -> ProbeResult:
    """The energy counter over a busy window: it never decreases, and its average power lies between
    the idle power and the board's power limit. A missing counter is unsupported, never 0."""
    if any(r is None for r in readings_mj) or len(readings_mj) < 2:
        return ProbeResult(
            "nvml.energy",
            "busy window",
            None,
            None,
            "W",
            Tolerance(),
            unsupported("nvmlDeviceGetTotalEnergyConsumption not available on this GPU"),
            ("energy",),
        )
    vals = [int(r) for r in readings_mj if r is not None]
    power = (vals[-1] - vals[0]) / 1e3 / seconds
    details = {"idle_w": idle_w, "power_limit_w": limit_w, "readings": len(vals)}
    if any(b < a for a, b in zip(vals, vals[1:])):
        verdict = "off by a decrease: the energy counter went backwards"
    elif vals[-1] == vals[0]:
        verdict = "off by 0 J: the energy counter did not move over a busy window (a stale or missing counter)"
    elif limit_w is not None and power > limit_w * 1.05:
        verdict = f"off by {power - limit_w:+.0f} W (average power above the board's limit)"
    elif idle_w is not None and power < idle_w * 0.95:
        verdict = f"off by {power - idle_w:+.0f} W (busy average below the idle power)"
    else:
        verdict = TRUSTED
    expected = None if idle_w is None or limit_w is None else (idle_w + limit_w) / 2
    return ProbeResult(
        "nvml.energy",
        "busy window: monotonic, idle <= mean power <= limit",
        expected,
        power,
        "W",
        Tolerance(),
        verdict,
        ("energy",),
        details,
    )


def clocks_result(clocks_mhz: list[int], max_mhz: int | None, reasons: list[int]) -> ProbeResult:
    """The SM clock during the probes, and whether it throttled (which invalidates comparisons)."""
    mask = 0
    for r in reasons:
        mask |= r
    names = throttle_names(mask)
    mean = sum(clocks_mhz) / len(clocks_mhz) if clocks_mhz else None
    verdict = TRUSTED if not names else f"off by throttling: {', '.join(names)}"
    return ProbeResult(
        "nvml.sm_clock",
        "SM clock during the probes, throttle reasons",
        max_mhz,
        mean,
        "MHz",
        Tolerance(),
        verdict,
        ("sm_clock",),
        {"reasons_mask": mask, "throttled": names},
    )


def duty_window(
    nv: Nvml, keep_busy: Callable[[float], None], duty: float, seconds: float, tick: Callable[[], None] | None = None
) -> tuple[list[int], float | None, float]:
    """Of every 100 ms, `duty` busy (keep_busy) and the rest idle, for `seconds` or long enough to hold
    WHOLE_PERIODS of NVML's sample period, whichever is longer; `tick` after each busy stretch. Returns
    the samples whose whole period lies in the window, the period (ms) and the window's length (s)."""
    known = nv.sample_period_ms()
    span = max(seconds, (WHOLE_PERIODS + 1) * known / 1e3) if known else seconds
    since = int(time.time() * 1e6)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < span:
        if duty > 0:
            keep_busy(0.1 * duty)
            if tick:
                tick()
        time.sleep(0.1 * (1 - duty))
    until = int(time.time() * 1e6)
    samples, period = nv.util_samples(since, until)
    return samples, period, time.perf_counter() - t0


@dataclass
class Nvml:
    """The readings the probes need, each None when the driver refuses it (say why, never 0). The
    device is the framework's cuda:`index` found by its UUID or PCI bus id (NVML numbers GPUs in
    another order than CUDA: tbdkit.env.nvml); the index alone only where NVML sees one GPU."""

    index: int
    uuid: str | None = None
    pci_bus_id: str | None = None

    def __post_init__(self) -> None:
        import pynvml

        from tbdkit.env.nvml import nvml_handle

        self.n = pynvml
        pynvml.nvmlInit()
        self.h, self.selected = nvml_handle(pynvml, self.index, self.uuid, self.pci_bus_id)

    def _try(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except self.n.NVMLError:
            return None

    def energy_mj(self) -> int | None:
        return self._try(lambda: self.n.nvmlDeviceGetTotalEnergyConsumption(self.h))

    def power_w(self) -> float | None:
        mw = self._try(lambda: self.n.nvmlDeviceGetPowerUsage(self.h))
        return None if mw is None else mw / 1e3

    def power_limit_w(self) -> float | None:
        mw = self._try(lambda: self.n.nvmlDeviceGetPowerManagementLimit(self.h))
        return None if mw is None else mw / 1e3

    def sm_clock(self) -> int | None:
        return self._try(lambda: self.n.nvmlDeviceGetClockInfo(self.h, self.n.NVML_CLOCK_SM))

    def max_sm_clock(self) -> int | None:
        return self._try(lambda: self.n.nvmlDeviceGetMaxClockInfo(self.h, self.n.NVML_CLOCK_SM))

    def reasons(self) -> int | None:
        return self._try(lambda: self.n.nvmlDeviceGetCurrentClocksEventReasons(self.h))

    def _buffer(self) -> list[Any]:
        """Every utilization sample the driver still keeps (lastSeenTimeStamp 0: all of them)."""
        got = self._try(lambda: self.n.nvmlDeviceGetSamples(self.h, self.n.NVML_GPU_UTILIZATION_SAMPLES, 0))
        return list(got[1]) if got else []

    def sample_period_ms(self) -> float | None:
        """NVML's utilization sample period (ms): the median spacing of the samples its buffer holds."""
        period_us = sample_period_us([s.timeStamp for s in self._buffer()])
        return None if period_us is None else period_us / 1e3

    def util_samples(self, since_us: int, until_us: int) -> tuple[list[int], float | None]:
        """The utilization samples whose whole period lies in [since_us, until_us] (µs since the epoch),
        by the run's own rule (tbdkit.agent.collectors.nvml.whole_periods), and the period (ms)."""
        inside: dict[int, float] = {
            int(s.timeStamp): s.sampleValue.uiVal for s in self._buffer() if since_us <= s.timeStamp <= until_us
        }
        period_us = sample_period_us(list(inside))
        if period_us is None:
            return [], None
        whole = whole_periods(inside, since_us, period_us)
        return [int(whole[t]) for t in sorted(whole)], period_us / 1e3

    def close(self) -> None:
        self._try(self.n.nvmlShutdown)


def probe(
    index: int,
    quick: bool,
    spin: Callable[[float], None] | None = None,
    uuid: str | None = None,
    pci_bus_id: str | None = None,
) -> list[ProbeResult]:
    """Busy, idle and 50% duty-cycle windows on GPU `index` (CUDA's; `uuid`/`pci_bus_id` name it to
    NVML), read through NVML. `spin(seconds)` keeps the GPU busy for that long and returns when it is
    done (default: torch.cuda._sleep)."""
    try:
        nv = Nvml(index, uuid, pci_bus_id)
    except Exception as exc:
        return [
            ProbeResult(
                "nvml",
                "NVML on this machine",
                None,
                None,
                "",
                Tolerance(),
                unsupported(f"NVML not usable: {type(exc).__name__}: {exc}"),
                ("gpu_utilization",),
            )
        ]
    if spin is None:
        spinner = _torch_spinner(index, nv.max_sm_clock())
        if isinstance(spinner, str):
            nv.close()
            return [
                ProbeResult(
                    "nvml.gpu_utilization",
                    "busy kernel",
                    100.0,
                    None,
                    "%",
                    UTIL_TOLERANCE,
                    unsupported(spinner),
                    ("gpu_utilization",),
                )
            ]
        spin = spinner
    keep_busy: Callable[[float], None] = spin
    seconds = 1.0 if quick else 6.0
    clocks: list[int] = []
    reasons: list[int] = []

    def read_clocks() -> None:
        c, r = nv.sm_clock(), nv.reasons()
        clocks.extend([c] if c is not None else [])
        reasons.extend([r] if r is not None else [])

    def window(duty: float) -> tuple[list[int], float | None, float]:
        return duty_window(nv, keep_busy, duty, seconds, read_clocks)

    keep_busy(0.01)  # the first spin makes CUDA's context and loads the kernel: outside every window
    idle_w = nv.power_w()
    out = []
    e0 = nv.energy_mj()
    busy = window(1.0)
    e1 = nv.energy_mj()
    out.append(utilization_result(f"busy kernel for {seconds:g} s", 100.0, busy[0], busy[1], busy[2]))
    out.append(energy_result([e0, e1], busy[2], idle_w, nv.power_limit_w()))
    idle = window(0.0)
    out.append(utilization_result(f"idle for {seconds:g} s", 0.0, idle[0], idle[1], idle[2]))
    duty = window(0.5)
    out.append(utilization_result(f"busy 50 ms / idle 50 ms for {seconds:g} s", 50.0, duty[0], duty[1], duty[2]))
    out.append(clocks_result(clocks, nv.max_sm_clock(), reasons))
    nv.close()
    return out


def _torch_spinner(index: int, max_mhz: int | None) -> Callable[[float], None] | str:
    try:
        import torch
    except ImportError:
        return "torch is not importable here: the GPU probes run in the PyTorch stack (tbdkit setup pytorch)"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    cycles_per_s = (max_mhz or 1500) * 1e6  # _sleep spins clock cycles; at a lower clock it runs longer

    def spin(seconds: float) -> None:
        with torch.cuda.device(index):
            torch.cuda._sleep(int(seconds * cycles_per_s))
            torch.cuda.synchronize()

    return spin
