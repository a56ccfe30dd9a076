"""The kernel timeline against NVML: the 50 ms busy / 50 ms idle duty cycle of calibrate.gpu, traced
by the kit's own torch.profiler path (tbdkit.adapters.pytorch_profiling.kernel_trace, the paper's
eq. 1 by tbdkit.analysis.timeline.utilization), with NVML's utilization samples whose whole period
lies in the duty cycle (calibrate.gpu.duty_window). The two must agree within TIMELINE_TOLERANCE and
both should sit near the nominal 50%.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from tbdkit.analysis.timeline import utilization
from tbdkit.calibrate.verdict import ProbeResult, Tolerance, judge, unsupported

TIMELINE_TOLERANCE = Tolerance(absolute=10.0)  # percentage points
NOMINAL = 50.0
INSTRUMENT = "torch_profiler.kernel_timeline"


def timeline_result(
    kernel_util: float | None, nvml_samples: list[int], period_ms: float | None, seconds: float, why: str | None = None
) -> ProbeResult:
    """The kernel-union utilization over the traced duty cycle (measured) against NVML's mean over
    the same window (expected)."""
    probe = f"busy 50 ms / idle 50 ms for {seconds:g} s: kernel union vs NVML"
    details: dict[str, Any] = {"nominal_pct": NOMINAL, "nvml_samples": len(nvml_samples), "sample_period_ms": period_ms}
    if kernel_util is None:
        return ProbeResult(
            INSTRUMENT,
            probe,
            None,
            None,
            "%",
            TIMELINE_TOLERANCE,
            unsupported(why or "the torch profiler traced no kernel"),
            ("gpu_utilization_trace",),
            details,
        )
    if not nvml_samples:
        return ProbeResult(
            INSTRUMENT,
            probe,
            None,
            kernel_util,
            "%",
            TIMELINE_TOLERANCE,
            unsupported("NVML returned no utilization samples for the window to compare with"),
            ("gpu_utilization_trace",),
            details,
        )
    nvml = sum(nvml_samples) / len(nvml_samples)
    details["timeline_vs_nominal"] = kernel_util - NOMINAL
    return ProbeResult(
        INSTRUMENT,
        probe,
        nvml,
        kernel_util,
        "%",
        TIMELINE_TOLERANCE,
        judge(nvml, kernel_util, TIMELINE_TOLERANCE, "%"),
        ("gpu_utilization_trace",),
        details,
    )


def probe(
    index: int,
    quick: bool,
    spin: Callable[[float], None] | None = None,
    uuid: str | None = None,
    pci_bus_id: str | None = None,
    tracer: Callable[[], AbstractContextManager[dict[str, Any]]] | None = None,
) -> ProbeResult:
    """Runs in the PyTorch stack: the duty cycle on cuda:`index` under the kit's kernel trace (`tracer`:
    a context that yields the dict kernel_trace fills on exit). NVML's samples are those of the duty
    cycle alone: the profiler's start and its trace's processing, seconds on a GPU, stay outside."""
    from tbdkit.calibrate.gpu import Nvml, _torch_spinner, duty_window

    seconds = 1.0 if quick else 4.0
    try:
        nv = Nvml(index, uuid, pci_bus_id)
    except Exception as exc:
        return timeline_result(None, [], None, seconds, f"NVML not usable: {type(exc).__name__}: {exc}")
    try:
        if spin is None:
            spinner = _torch_spinner(index, nv.max_sm_clock())
            if isinstance(spinner, str):
                return timeline_result(None, [], None, seconds, spinner)
            spin = spinner
        keep_busy: Callable[[float], None] = spin
        keep_busy(0.01)  # CUDA's context and the kernel are ready before the trace starts
        with (tracer or _kernel_trace(index))() as got:
            samples, period, _ = duty_window(nv, keep_busy, 0.5, seconds)
    finally:
        nv.close()
    kernels, elapsed = got.get("kernels") or [], got.get("elapsed_us") or 0.0
    util = utilization(kernels, elapsed) if kernels and elapsed > 0 else None
    return timeline_result(util, samples, period, seconds)


def _kernel_trace(index: int) -> Callable[[], AbstractContextManager[dict[str, Any]]]:
    import torch

    from tbdkit.adapters.pytorch_profiling import kernel_trace

    return lambda: kernel_trace(torch.device(f"cuda:{index}"))
