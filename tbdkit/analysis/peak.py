"""Peak FLOP/s of a GPU from what the device reports (SM count, SM clock, compute capability),
and model FLOPs utilization (MFU) against the peak of the math mode that ran.

Per-SM rates by compute capability (dense, per clock, 1 FMA = 2 FLOPs), from NVIDIA's
architecture whitepapers: FP32 lanes are the CUDA cores per SM; tensor rates are dense (no
sparsity). fp32 runs (TF32 off) are held against the FP32 CUDA-core peak, tf32 runs against
the TF32 tensor peak, amp runs against the FP16 tensor peak (FP32 accumulation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tbdkit.metric import metric, missing

# compute capability -> FP32 FMA lanes per SM
FP32_LANES_PER_SM: dict[str, int] = {
    "6.0": 64, "6.1": 128, "7.0": 64, "7.2": 64, "7.5": 64,
    "8.0": 64, "8.6": 128, "8.7": 128, "8.9": 128, "9.0": 128,
}
# compute capability -> dense tensor-core FLOPs per clock per SM, by input type
TENSOR_FLOPS_PER_CLOCK_PER_SM: dict[str, dict[str, int]] = {
    "7.0": {"fp16": 1024},
    "7.2": {"fp16": 1024},
    "7.5": {"fp16": 1024},
    "8.0": {"fp16": 2048, "tf32": 1024},
    "8.6": {"fp16": 512, "tf32": 256},
    "8.7": {"fp16": 1024, "tf32": 512},
    "8.9": {"fp16": 512, "tf32": 256},
    "9.0": {"fp16": 4096, "tf32": 2048},
}
MODE_UNIT = {"fp32": "fp32 CUDA cores", "tf32": "tf32 tensor cores", "amp": "fp16 tensor cores"}


@dataclass(frozen=True)
class Device:
    name: str
    compute_capability: str   # "9.0"
    sm_count: int
    sm_clock_mhz: float       # the maximum (boost) SM clock
    clock_source: str


def peak_flops(device: Device, mode: str) -> tuple[float | None, str, str | None]:
    """(peak FLOP/s or None, method, reason if None) of the math mode `mode` (fp32, tf32, amp)."""
    cc, clock_hz = device.compute_capability, device.sm_clock_mhz * 1e6
    base = f"{device.sm_count} SMs x {device.sm_clock_mhz:.0f} MHz ({device.clock_source})"
    if mode == "fp32":
        lanes = FP32_LANES_PER_SM.get(cc)
        if lanes is None:
            return None, base, f"FP32 lanes per SM of compute capability {cc} are not in tbdkit's table"
        return device.sm_count * clock_hz * lanes * 2, f"{base} x {lanes} FP32 FMA lanes x 2 FLOPs", None
    kind = {"tf32": "tf32", "amp": "fp16"}.get(mode)
    if kind is None:
        return None, base, f"unknown math mode {mode!r}"
    rate = TENSOR_FLOPS_PER_CLOCK_PER_SM.get(cc, {}).get(kind)
    if rate is None:
        return None, base, f"compute capability {cc} has no dense {kind} tensor rate in tbdkit's table"
    return device.sm_count * clock_hz * rate, f"{base} x {rate} dense {kind} tensor FLOPs per clock per SM", None


def peak_metric(device: Device | None, mode: str, reason: str | None = None) -> dict[str, Any]:
    unit = "FLOP/s"
    if device is None:
        return missing(unit, f"device peak for math mode {mode}", reason or "no GPU")
    value, method, why = peak_flops(device, mode)
    return metric(value, unit, f"{method} ({MODE_UNIT.get(mode, mode)}, math mode {mode})", reason=why,
                  device=device.name, compute_capability=device.compute_capability)


def mfu_metric(flops_per_work: float | None, throughput: float | None, peak: dict[str, Any],
               flops_reason: str | None = None) -> dict[str, Any]:
    """MFU % = model FLOPs per unit of work x work per second / peak FLOP/s of the math mode."""
    method = "model FLOPs per unit of work (torch.utils.flop_counter, one training step) x throughput / peak FLOP/s"
    if flops_per_work is None:
        return missing("%", method, flops_reason or "model FLOPs were not counted")
    if throughput is None:
        return missing("%", method, "no throughput was measured")
    if peak.get("value") is None:
        return missing("%", method, f"no peak FLOP/s: {peak.get('reason')}")
    return metric(100.0 * flops_per_work * throughput / peak["value"], "%", method,
                  peak_flops=peak["value"], peak_method=peak["method"])
