"""Peak FLOP/s of a GPU, and model FLOPs utilization (MFU) against the peak of the math mode that ran.

The peak comes first from the product: NVIDIA's datasheet dense (no sparsity) peaks of the GPU the
device name says it is (PRODUCTS, one source per row), because one compute capability covers parts
with different tensor rates (8.6 and 8.9: GeForce cards do FP16/TF32 tensor math with FP32
accumulation at half the rate of A10, A40, L4 and L40S). Only a GPU missing from that table falls
back to the per-SM rates of its compute capability (dense, per clock, 1 FMA = 2 FLOPs, from NVIDIA's
architecture whitepapers) x SM count x max SM clock, saying so. fp32 runs (TF32 off) are held
against the FP32 CUDA-core peak, tf32 runs against the TF32 tensor peak, amp runs against the FP16
tensor peak (FP32 accumulation), bf16 runs against the BF16 tensor peak (the datasheets' "BF16 Tensor
Core" row; none on V100 and T4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tbdkit.core.metric import metric, missing

# compute capability -> FP32 FMA lanes per SM
FP32_LANES_PER_SM: dict[str, int] = {
    "6.0": 64,
    "6.1": 128,
    "7.0": 64,
    "7.2": 64,
    "7.5": 64,
    "8.0": 64,
    "8.6": 128,
    "8.7": 128,
    "8.9": 128,
    "9.0": 128,
}
# compute capability -> dense tensor-core FLOPs per clock per SM, by input type (8.6/8.9: GeForce rates;
# the data-center parts of those capabilities are in PRODUCTS). bf16 runs at the fp16 rate (FP32
# accumulation) on every architecture that has it (NVIDIA Ampere GA100 and GA102, Ada, Hopper whitepapers);
# Volta and Turing have no bf16 tensor math
TENSOR_FLOPS_PER_CLOCK_PER_SM: dict[str, dict[str, int]] = {
    "7.0": {"fp16": 1024},
    "7.2": {"fp16": 1024},
    "7.5": {"fp16": 1024},
    "8.0": {"fp16": 2048, "bf16": 2048, "tf32": 1024},
    "8.6": {"fp16": 512, "bf16": 512, "tf32": 256},
    "8.7": {"fp16": 1024, "bf16": 1024, "tf32": 512},
    "8.9": {"fp16": 512, "bf16": 512, "tf32": 256},
    "9.0": {"fp16": 4096, "bf16": 4096, "tf32": 2048},
}
# Dense peaks in TFLOP/s from NVIDIA's datasheets ("* with sparsity" figures halved), matched against
# the device name NVML / the framework reports, most specific pattern first.
V100_DS = "NVIDIA V100 Tensor Core GPU datasheet (images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf)"
T4_DS = "NVIDIA T4 Tensor Core GPU datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf)"
A10_DS = "NVIDIA A10 Tensor Core GPU datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf)"
A40_DS = "NVIDIA A40 datasheet (images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf)"
A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"
L4_DS = "NVIDIA L4 Tensor Core GPU datasheet (resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet)"
L40S_DS = "NVIDIA L40S datasheet (resources.nvidia.com/en-us-l40s/l40s-datasheet-28413)"
L40_DS = "NVIDIA L40 datasheet (images.nvidia.com/content/Solutions/data-center/vgpu-L40-datasheet.pdf)"
H100_DS = (
    "NVIDIA H100 Tensor Core GPU datasheet (resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)"
)
H200_DS = (
    "NVIDIA H200 Tensor Core GPU datasheet (nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446)"
)
# Blackwell (compute capability 10.0): the per-GPU rates are the 8-GPU HGX B200 and the 72-GPU GB200 NVL72 rows
# divided by their GPU counts (and the sparse tensor figures halved)
B200_DS = "NVIDIA HGX B200 datasheet (nvidia.com/en-us/data-center/hgx/: HGX B200, 8 GPUs)"
GB200_DS = "NVIDIA GB200 NVL72 datasheet (nvidia.com/en-us/data-center/gb200-nvl72/: 72 Blackwell GPUs)"


@dataclass(frozen=True)
class Product:
    name: str
    pattern: str  # regular expression over the reported device name
    fp32: float  # TFLOP/s, FP32 CUDA cores
    tf32: float | None  # TFLOP/s, dense TF32 tensor (None: the GPU has no TF32 tensor math)
    fp16: float | None  # TFLOP/s, dense FP16 tensor with FP32 accumulation
    bf16: float | None  # TFLOP/s, dense BF16 tensor (None: the GPU has no bfloat16 tensor math)
    source: str
    fp8: float | None = None  # TFLOP/s, dense FP8 tensor (None: no FP8 tensor math, Ada and newer have it)


PRODUCTS: tuple[Product, ...] = (
    Product("V100S PCIe", r"V100S", 16.4, None, 130.0, None, V100_DS),
    Product("V100 PCIe", r"V100.*PCIE", 14.0, None, 112.0, None, V100_DS),
    Product("V100 SXM2", r"V100", 15.7, None, 125.0, None, V100_DS),
    Product("T4", r"\bT4\b", 8.1, None, 65.0, None, T4_DS),
    Product("A100", r"\bA100\b", 19.5, 156.0, 312.0, 312.0, A100_DS),
    Product("A10", r"\bA10\b(?![0-9G])", 31.2, 62.5, 125.0, 125.0, A10_DS),
    Product("A40", r"\bA40\b", 37.4, 74.8, 149.7, 149.7, A40_DS),
    Product("L40S", r"\bL40S\b", 91.6, 183.0, 362.05, 362.05, L40S_DS, fp8=733.0),
    Product("L40", r"\bL40\b(?!S)", 90.5, 90.5, 181.05, 181.05, L40_DS, fp8=362.0),
    Product("L4", r"\bL4\b", 30.3, 60.0, 121.0, 121.0, L4_DS, fp8=242.5),
    Product("H100 NVL", r"H100 NVL", 60.0, 417.5, 835.5, 835.5, H100_DS, fp8=1670.5),
    Product("H100 PCIe", r"H100.*PCIE", 51.0, 378.0, 756.5, 756.5, H100_DS, fp8=1513.0),
    Product("H100 SXM", r"H100 80GB HBM3|H100 SXM", 67.0, 494.5, 989.5, 989.5, H100_DS, fp8=1979.0),
    Product("H200 NVL", r"H200 NVL", 60.0, 417.5, 835.5, 835.5, H200_DS, fp8=1670.5),
    Product("H200 SXM", r"\bH200\b", 67.0, 494.5, 989.5, 989.5, H200_DS, fp8=1979.0),
    # GB200 NVL72: FP32 5,760 TFLOPS, TF32 180 PFLOPS, FP16/BF16 360 PFLOPS, FP8 720 PFLOPS (sparse) over 72 GPUs
    Product("GB200", r"\bGB200\b", 80.0, 1250.0, 2500.0, 2500.0, GB200_DS, fp8=5000.0),
    # HGX B200: FP32 600 TFLOPS, TF32 18 PFLOPS, FP16/BF16 36 PFLOPS, FP8 72 PFLOPS (tensor rates sparse) over 8 GPUs
    Product("B200", r"\bB200\b", 75.0, 1125.0, 2250.0, 2250.0, B200_DS, fp8=4500.0),
)


def product_of(name: str) -> Product | None:
    """The datasheet row for a reported device name ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB")."""
    return next((p for p in PRODUCTS if re.search(p.pattern, name, re.IGNORECASE)), None)


MODE_UNIT = {
    "fp32": "fp32 CUDA cores",
    "tf32": "tf32 tensor cores",
    "amp": "fp16 tensor cores",
    "bf16": "bf16 tensor cores",
    "fp8": "fp8 tensor cores",
}
# bfloat16 tensor math came with Ampere (compute capability 8.0); Volta (V100) and Turing (T4) have none
BF16_CAPABILITY = (8, 0)


def bf16_refusal(name: str, capability: tuple[int, int]) -> str | None:
    """None where the GPU trains in bfloat16; else the sentence a bf16 run refuses with."""
    if tuple(capability) >= BF16_CAPABILITY:
        return None
    return (
        f"--precision bf16 needs a GPU with bfloat16 tensor cores (compute capability 8.0 or newer: A100, A10, "
        f"L4, H100, ...) and {name} is {capability[0]}.{capability[1]}: run --precision amp (float16 with loss "
        "scaling) or fp32 on it"
    )


# FP8 tensor math came with Ada and Hopper (compute capability 8.9 and 9.0): torch._scaled_mm's CUDA kernels need it
FP8_CAPABILITY = (8, 9)


def fp8_refusal(name: str, capability: tuple[int, int]) -> str | None:
    """None where the GPU trains in float8; else the sentence an fp8 run refuses with."""
    if tuple(capability) >= FP8_CAPABILITY:
        return None
    return (
        f"--precision fp8 needs a GPU with FP8 tensor cores (compute capability 8.9 or newer: L4, L40S, H100, H200, "
        f"B200) and {name} is {capability[0]}.{capability[1]}: run --precision bf16 on it"
    )


@dataclass(frozen=True)
class Device:
    name: str
    compute_capability: str  # "9.0"
    sm_count: int
    sm_clock_mhz: float  # the maximum (boost) SM clock
    clock_source: str


def peak_flops(device: Device, mode: str) -> tuple[float | None, str, str | None]:
    """(peak FLOP/s or None, method, reason if None) of the math mode `mode` (fp32, tf32, amp)."""
    product = product_of(device.name)
    if product is not None:
        rates = {
            "fp32": product.fp32,
            "tf32": product.tf32,
            "amp": product.fp16,
            "bf16": product.bf16,
            "fp8": product.fp8,
        }
        tflops = rates.get(mode)
        method = f"{product.name} dense {MODE_UNIT.get(mode, mode)} peak from the {product.source}"
        if mode not in MODE_UNIT:
            return None, method, f"unknown math mode {mode!r}"
        if tflops is None:
            return None, method, f"the {product.name} has no {MODE_UNIT[mode]} (no {mode} tensor math)"
        return tflops * 1e12, method, None
    cc, clock_hz = device.compute_capability, device.sm_clock_mhz * 1e6
    base = f"{device.sm_count} SMs x {device.sm_clock_mhz:.0f} MHz ({device.clock_source})"
    if mode == "fp32":
        lanes = FP32_LANES_PER_SM.get(cc)
        if lanes is None:
            return None, base, f"FP32 lanes per SM of compute capability {cc} are not in tbdkit's table"
        return device.sm_count * clock_hz * lanes * 2, f"{base} x {lanes} FP32 FMA lanes x 2 FLOPs", None
    kind = {"tf32": "tf32", "amp": "fp16", "bf16": "bf16", "fp8": "fp8"}.get(mode)
    if kind is None:
        return None, base, f"unknown math mode {mode!r}"
    rate = TENSOR_FLOPS_PER_CLOCK_PER_SM.get(cc, {}).get(kind)
    if rate is None:
        return None, base, f"compute capability {cc} has no dense {kind} tensor rate in tbdkit's table"
    note = (
        " (GeForce rate: a data-center part of this compute capability does twice this; it is not in "
        "tbdkit's product table)"
        if cc in ("8.6", "8.9")
        else ""
    )
    return (
        device.sm_count * clock_hz * rate,
        f"{base} x {rate} dense {kind} tensor FLOPs per clock per SM{note}",
        None,
    )


def peak_metric(device: Device | None, mode: str, reason: str | None = None) -> dict[str, Any]:
    unit = "FLOP/s"
    if device is None:
        return missing(unit, f"device peak for math mode {mode}", reason or "no GPU")
    value, method, why = peak_flops(device, mode)
    return metric(
        value,
        unit,
        f"{method} ({MODE_UNIT.get(mode, mode)}, math mode {mode})",
        reason=why,
        device=device.name,
        compute_capability=device.compute_capability,
    )


# A mixed math mode computes part of the step in another mode: fp8 runs their float8 linear layers at the FP8
# rate and the rest (attention, norms, the output projection) in bf16. Its MFU is shown against both peaks.
MIXED_WITH = {"fp8": "bf16"}


def mfu_metric(
    flops_per_work: float | None,
    throughput: float | None,
    peak: dict[str, Any],
    flops_reason: str | None = None,
    other_peak: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """MFU % = model FLOPs per unit of work x work per second / peak FLOP/s of the math mode; for a mixed mode
    (MIXED_WITH) `other_peak` is the other mode's, and the MFU against it is recorded beside (`mfu_other`)."""
    method = "model FLOPs per unit of work (torch.utils.flop_counter, one training step) x throughput / peak FLOP/s"
    if flops_per_work is None:
        return missing("%", method, flops_reason or "model FLOPs were not counted")
    if throughput is None:
        return missing("%", method, "no throughput was measured")
    if peak.get("value") is None:
        return missing("%", method, f"no peak FLOP/s: {peak.get('reason')}")
    mfu = 100.0 * flops_per_work * throughput / peak["value"]
    if mfu > 100.0:  # torchtitan's lesson: a peak of the wrong math mode or of another GPU gave 150 %
        return missing(
            "%",
            method,
            f"{mfu:.0f} % of the peak is impossible: the peak ({peak['method']}) is not this GPU's rate for the "
            "math mode that ran",
        )
    beside: dict[str, Any] = {}
    if other_peak is not None and other_peak.get("value"):
        other = 100.0 * flops_per_work * throughput / other_peak["value"]
        beside = {
            "mfu_other": other if other <= 100.0 else None,
            "other_peak_flops": other_peak["value"],
            "other_peak_method": other_peak["method"],
        }
    return metric(
        mfu,
        "%",
        method,
        peak_flops=peak["value"],
        peak_method=peak["method"],
        **beside,
    )
