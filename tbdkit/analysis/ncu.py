"""FP32 utilization as the paper defines it (eq. 2) and tensor-pipe utilization per kernel, from
Nsight Compute's raw CSV page (`ncu --import R --csv --page raw --print-units base`).

FP32 FLOPs of a kernel = 2 x FFMA + FADD + FMUL thread instructions executed with their
predicate on (smsp__sass_thread_inst_executed_op_{ffma,fadd,fmul}_pred_on.sum); its FP32
utilization = those FLOPs / (peak FP32 FLOP/s x the kernel's duration, gpu__time_duration.sum).
The run's FP32 utilization is the sum of FLOPs over the sum of durations of the profiled
kernels (the active time T of eq. 2). Tensor-pipe utilization is ncu's
sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active, averaged weighted by duration.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
FADD = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
FMUL = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"
DURATION = "gpu__time_duration.sum"
TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
METRICS = (FFMA, FADD, FMUL, DURATION, TENSOR)
TIME_UNITS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
              "second": 1.0, "s": 1.0}


@dataclass(frozen=True)
class KernelCounters:
    name: str
    seconds: float
    fp32_flops: float
    tensor_percent: float | None


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    return float(text)


def parse_raw_csv(text: str) -> list[KernelCounters]:
    """One KernelCounters per profiled kernel launch. Lines before the CSV header (ncu's ==PROF==
    messages) are skipped; the row after the header holds the units."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu raw CSV header (a line starting with \"ID\") in the text")
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(reader)
    units = dict(zip(header, next(reader)))
    missing = [m for m in (FFMA, FADD, FMUL, DURATION) if m not in header]
    if missing:
        raise ValueError(f"the ncu CSV lacks the metrics {missing}")
    scale = TIME_UNITS.get(units.get(DURATION, "nsecond").strip() or "nsecond")
    if scale is None:
        raise ValueError(f"unknown time unit {units.get(DURATION)!r} for {DURATION}")
    out = []
    for row in reader:
        if len(row) < len(header):
            continue
        r = dict(zip(header, row))
        seconds = (_number(r[DURATION]) or 0.0) * scale
        flops = 2 * (_number(r[FFMA]) or 0.0) + (_number(r[FADD]) or 0.0) + (_number(r[FMUL]) or 0.0)
        out.append(KernelCounters(r["Kernel Name"], seconds, flops, _number(r[TENSOR]) if TENSOR in r else None))
    return out


def per_kernel(kernels: list[KernelCounters], peak_fp32: float) -> dict[str, dict[str, float | None]]:
    """By kernel name: FP32 utilization % (eq. 2 over its launches) and duration-weighted tensor %."""
    flops: dict[str, float] = defaultdict(float)
    secs: dict[str, float] = defaultdict(float)
    tensor: dict[str, float] = defaultdict(float)
    tensor_secs: dict[str, float] = defaultdict(float)
    for k in kernels:
        flops[k.name] += k.fp32_flops
        secs[k.name] += k.seconds
        if k.tensor_percent is not None:
            tensor[k.name] += k.tensor_percent * k.seconds
            tensor_secs[k.name] += k.seconds
    return {name: {"fp32_utilization": 100.0 * flops[name] / (peak_fp32 * secs[name]) if secs[name] > 0 else None,
                   "tensor_utilization": tensor[name] / tensor_secs[name] if tensor_secs[name] > 0 else None}
            for name in secs}


def overall(kernels: list[KernelCounters], peak_fp32: float) -> dict[str, Any]:
    """Eq. 2 over all profiled kernels, and the duration-weighted tensor-pipe utilization."""
    seconds = sum(k.seconds for k in kernels)
    if seconds <= 0:
        raise ValueError("the profiled kernels have no duration")
    timed = [k for k in kernels if k.tensor_percent is not None]
    tsec = sum(k.seconds for k in timed)
    return {"fp32_utilization": 100.0 * sum(k.fp32_flops for k in kernels) / (peak_fp32 * seconds),
            "tensor_utilization": sum(k.tensor_percent * k.seconds for k in timed) / tsec if tsec > 0 else None,
            "kernels": len(kernels), "active_seconds": seconds}
