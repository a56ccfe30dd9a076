"""GPM and Nsight Compute against FLOP counts: GEMMs whose FLOPs are known by construction.

- ncu: one SGEMM (TF32 off) of M x K by K x N runs inside a cudaProfilerStart/Stop range under the
  kit's own ncu command (tbdkit.analysis.ncu.profile_args and its metrics); its
  FP32 FLOPs by the kit's FFMA-derived formula (2 x FFMA + FADD + FMUL, analysis.ncu.parse_raw_csv)
  must equal 2·M·N·K. With M, N, K multiples of every cuBLAS tile there is no tail; what else the
  GEMM may execute (alpha scaling, a split-K reduction: at most a few M·N operations, under
  1/(2K) each) stays inside FLOP_TOLERANCE. A TF32 GEMM of the same shape must show the tensor pipe
  busy and (almost) no FP32 FLOPs.
- GPM: the same GEMMs back to back for a window, GPM sampled around it by the agent's own
  GpmCollector: FP32 (TF32 off) -> FP32 pipe high, tensor pipe ~0; TF32 or BF16 -> the reverse.
- Peak: the window's achieved FLOP/s (2·M·N·K x GEMMs / wall time, launch gaps included, so never
  above the truth) must not exceed the peak table's figure for this product
  (tbdkit.analysis.peak): a rate above it means the table is wrong for this SKU.

The verdicts are plain functions over the readings (tested on constructed values); the device code
runs in the PyTorch stack's interpreter (tbdkit.calibrate.stack).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tbdkit.analysis import ncu
from tbdkit.analysis.peak import Device, peak_flops
from tbdkit.calibrate.verdict import TRUSTED, ProbeResult, Tolerance, judge, unsupported

GEMM = (4096, 4096, 4096)  # M, N, K: multiples of every cuBLAS tile, so no tail
QUICK_GEMM = (2048, 2048, 2048)
FLOP_TOLERANCE = Tolerance(relative=0.01)
PIPE_HIGH = 40.0  # % of time: a GEMM running back to back keeps its own pipe at least this busy
PIPE_LOW = 5.0  # % of time: the pipe a GEMM does not use stays under this
FP32_SHARE_LOW = 0.01  # a tensor GEMM's FP32 FLOPs (epilogue) as a share of 2·M·N·K
PEAK_SLACK = 0.02  # achieved above peak x (1 + this): the peak table is wrong for this SKU
MODES = ("fp32", "tf32", "bf16")
# What the FP32 pipe runs besides FP32 math (NVIDIA: on GH100 the FMA pipes execute IMAD and IDP too)
FMA_PIPE_NOTE = "the FP32 pipe also executes integer multiply-adds, such as a GEMM's address arithmetic"
PEAK_MODE = {"fp32": "fp32", "tf32": "tf32", "bf16": "amp"}  # BF16 dense tensor peak = FP16's on A100/H100
NCU_TIMEOUT_S = 300.0


def gemm_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def _shape(m: int, n: int, k: int) -> str:
    return f"{m}x{k} @ {k}x{n}"


def ncu_result(mode: str, m: int, n: int, k: int, kernels: list[ncu.KernelCounters]) -> ProbeResult:
    """The kernels ncu profiled inside one GEMM's range: for fp32, FLOPs == 2·M·N·K and the tensor pipe
    idle; for tf32/bf16, the tensor pipe high and FP32 FLOPs under FP32_SHARE_LOW of 2·M·N·K."""
    truth = gemm_flops(m, n, k)
    probe = f"{mode.upper()} GEMM {_shape(m, n, k)} under ncu"
    if not kernels:
        metrics = ("fp32_utilization",) if mode == "fp32" else ("tensor_utilization",)
        return ProbeResult(
            f"ncu.{'fp32_flops' if mode == 'fp32' else 'tensor_pipe'}",
            probe,
            None,
            None,
            "",
            Tolerance(),
            unsupported("ncu profiled no kernel inside the GEMM's profiler range"),
            metrics,
        )
    flops = sum(x.fp32_flops for x in kernels)
    tensor = ncu.tensor_share(kernels)
    details: dict[str, Any] = {
        "kernels": [x.name for x in kernels],
        "tensor_pipe_pct": tensor,
        "fp32_flops": flops,
        "formula": "2 x FFMA + FADD + FMUL (tbdkit.analysis.ncu)",
    }
    if mode == "fp32":
        verdict = judge(truth, flops, FLOP_TOLERANCE, "FLOP")
        if verdict == TRUSTED and tensor is not None and tensor > PIPE_LOW:
            verdict = f"off by {tensor:.0f}% tensor pipe in a TF32-off SGEMM (TF32 was not off, or the metric is wrong)"
        return ProbeResult(
            "ncu.fp32_flops", probe, truth, flops, "FLOP", FLOP_TOLERANCE, verdict, ("fp32_utilization",), details
        )
    share = flops / truth
    details.update(
        fp32_share=share, rule=f"tensor pipe >= {PIPE_HIGH:g}% and FP32 FLOPs <= {FP32_SHARE_LOW:.0%} of 2MNK"
    )
    if tensor is None:
        verdict = unsupported("ncu reported no tensor-pipe metric")
    elif tensor < PIPE_HIGH:
        verdict = f"off by {tensor - PIPE_HIGH:+.0f} points: tensor pipe {tensor:.0f}% in a {mode.upper()} GEMM"
    elif share > FP32_SHARE_LOW:
        verdict = f"off by {share:.1%} of 2MNK counted as FP32 FLOPs in a {mode.upper()} GEMM"
    else:
        verdict = TRUSTED
    return ProbeResult(
        "ncu.tensor_pipe", probe, PIPE_HIGH, tensor, "%", Tolerance(), verdict, ("tensor_utilization",), details
    )


def ncu_result_from_csv(mode: str, m: int, n: int, k: int, text: str) -> ProbeResult:
    try:
        kernels = ncu.parse_raw_csv(text)
    except ValueError as exc:
        return ProbeResult(
            "ncu.fp32_flops" if mode == "fp32" else "ncu.tensor_pipe",
            f"{mode.upper()} GEMM {_shape(m, n, k)} under ncu",
            None,
            None,
            "",
            Tolerance(),
            unsupported(f"ncu's CSV could not be read: {exc}"),
            ("fp32_utilization",) if mode == "fp32" else ("tensor_utilization",),
        )
    return ncu_result(mode, m, n, k, kernels)


def _pipe_value(m: dict[str, Any] | None) -> tuple[float | None, str | None]:
    if not m:
        return None, "not measured"
    return m.get("value"), m.get("reason")


def gpm_results(mode: str, shape: tuple[int, int, int], got: dict[str, dict[str, Any]]) -> list[ProbeResult]:
    """GPM's pipes over a window of back-to-back GEMMs (`got`: GpmCollector.stop()'s metrics): the pipe
    the GEMM uses must read high, the other low; each reading is its own metric's probe, so a fault in
    one pipe's reading leaves the other's verdict alone."""
    fp32, why32 = _pipe_value(got.get("gpm_fp32_pipe"))
    tensor, whyt = _pipe_value(got.get("gpm_tensor_pipe"))
    probe = f"{mode.upper()} GEMMs {_shape(*shape)} back to back"
    mine, other = ("gpm_fp32_pipe", "gpm_tensor_pipe") if mode == "fp32" else ("gpm_tensor_pipe", "gpm_fp32_pipe")
    high, low = (fp32, tensor) if mode == "fp32" else (tensor, fp32)
    details = {"fp32_pipe_pct": fp32, "tensor_pipe_pct": tensor}
    gap = unsupported(f"NVML GPM did not measure the pipes ({why32 or whyt})")
    if high is None or low is None:
        busy = idle = gap
    else:
        ran = f"while a {mode.upper()} GEMM ran"
        busy = TRUSTED if high >= PIPE_HIGH else f"off by {high - PIPE_HIGH:+.0f} points: {mine} {high:.0f}% {ran}"
        idle = TRUSTED if low <= PIPE_LOW else f"off by {low - PIPE_LOW:+.0f} points: {other} {low:.0f}% {ran}"
        if idle != TRUSTED and other == "gpm_fp32_pipe":
            idle += f" ({FMA_PIPE_NOTE})"
    return [
        ProbeResult(
            f"gpm.{mine.removeprefix('gpm_')}",
            probe,
            PIPE_HIGH,
            high,
            "%",
            Tolerance(),
            busy,
            (mine,),
            {**details, "rule": f"{mine} >= {PIPE_HIGH:g}%"},
        ),
        ProbeResult(
            f"gpm.{other.removeprefix('gpm_')}",
            f"{probe}: the pipe it does not use",
            PIPE_LOW,
            low,
            "%",
            Tolerance(),
            idle,
            (other,),
            {**details, "rule": f"{other} <= {PIPE_LOW:g}%"},
        ),
    ]


def peak_result(mode: str, device: Device | None, achieved: float | None, why: str | None = None) -> ProbeResult:
    """Achieved FLOP/s against the peak table's figure for this product and math mode."""
    probe = f"{mode.upper()} GEMM achieved FLOP/s <= the peak table's"
    metrics = ("mfu", "fp32_utilization") if mode == "fp32" else ("mfu",)
    if device is None or achieved is None:
        return ProbeResult(
            "peak_table", probe, None, achieved, "FLOP/s", Tolerance(), unsupported(why or "no GPU to compare"), metrics
        )
    peak, method, reason = peak_flops(device, PEAK_MODE[mode])
    details = {"device": device.name, "peak_method": method, "fraction_of_peak": None if not peak else achieved / peak}
    if peak is None:
        return ProbeResult(
            "peak_table", probe, None, achieved, "FLOP/s", Tolerance(), unsupported(reason or method), metrics, details
        )
    if achieved > peak * (1 + PEAK_SLACK):
        verdict = (
            f"off by {achieved / peak - 1:+.1%}: measured above the peak ({method}): the peak table is "
            f"wrong for this SKU ({device.name})"
        )
    else:
        verdict = TRUSTED
    return ProbeResult("peak_table", probe, peak, achieved, "FLOP/s", Tolerance(), verdict, metrics, details)


# --- device code: runs in the PyTorch stack's interpreter ---------------------------------------


def set_math(torch: Any, mode: str) -> Any:
    """TF32 on only for tf32 (as tbdkit.adapters.pytorch does for a run's math mode); the GEMM's dtype."""
    tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return torch.bfloat16 if mode == "bf16" else torch.float32


def _operands(torch: Any, device: str, mode: str, shape: tuple[int, int, int]) -> tuple[Any, Any, Any]:
    m, n, k = shape
    dtype = set_math(torch, mode)
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.rand(m, k, device=device, dtype=dtype, generator=gen)
    b = torch.rand(k, n, device=device, dtype=dtype, generator=gen)
    return a, b, torch.empty(m, n, device=device, dtype=dtype)


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def profiled_gemm(device: str, mode: str, shape: tuple[int, int, int]) -> None:
    """One GEMM inside a cudaProfilerStart/Stop range (what `ncu --profile-from-start off` profiles);
    a warm-up GEMM first, outside the range, so cuBLAS's set-up kernels are not counted."""
    import torch

    a, b, out = _operands(torch, device, mode, shape)
    torch.matmul(a, b, out=out)
    _sync(torch, device)
    torch.cuda.profiler.start()
    try:
        torch.matmul(a, b, out=out)
        _sync(torch, device)
    finally:
        torch.cuda.profiler.stop()


def gemm_window(
    device: str,
    index: int | None,
    mode: str,
    shape: tuple[int, int, int],
    seconds: float,
    peak_device: Device | None,
    peak_why: str | None = None,
    uuid: str | None = None,
    pci_bus_id: str | None = None,
) -> list[ProbeResult]:
    """GEMMs back to back for `seconds` with GPM sampled around them: GPM's pipes and the peak check."""
    import torch

    from tbdkit.agent.collectors.gpm import GpmCollector

    a, b, out = _operands(torch, device, mode, shape)
    for _ in range(3):
        torch.matmul(a, b, out=out)
    _sync(torch, device)
    gpm = GpmCollector(index, uuid, pci_bus_id)
    gpm.start()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            torch.matmul(a, b, out=out)
        n += 10
        _sync(torch, device)
    wall = time.perf_counter() - t0
    got = gpm.stop()
    achieved = gemm_flops(*shape) * n / wall
    result = peak_result(mode, peak_device, achieved, peak_why)
    result.details.update(gemms=n, wall_s=wall, method="2MNK x GEMMs / wall time (perf_counter, synchronized)")
    return [*gpm_results(mode, shape, got), result]


# --- host side: ncu around the PyTorch stack's interpreter ---------------------------------------

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def ncu_probe(
    python: Path,
    index: int,
    quick: bool,
    env: dict[str, str],
    exe: str | None = None,
    run: Runner = subprocess.run,
    skip: str | None = None,
) -> list[ProbeResult]:
    """An FP32 and a TF32 GEMM, each in its own process under the kit's ncu command (`skip`: why the
    PyTorch stack cannot run them, when it cannot)."""
    from tbdkit.env import nsight

    shape = QUICK_GEMM if quick else GEMM
    exe = exe or nsight.find("ncu")
    out = []
    for mode in ("fp32", "tf32"):

        def gap(why: str, mode: str = mode) -> ProbeResult:
            return ProbeResult(
                "ncu.fp32_flops" if mode == "fp32" else "ncu.tensor_pipe",
                f"{mode.upper()} GEMM {_shape(*shape)} under ncu",
                None,
                None,
                "",
                Tolerance(),
                unsupported(why),
                ("fp32_utilization",) if mode == "fp32" else ("tensor_utilization",),
            )

        if skip or exe is None:
            out.append(gap(skip or "Nsight Compute (ncu) is not installed here"))
            continue
        with tempfile.TemporaryDirectory(prefix="tbdkit-calibrate-ncu-") as tmp:
            report = Path(tmp) / f"gemm-{mode}"
            cmd = ncu.profile_args(exe, report, launch_count=1) + [
                str(python),
                "-m",
                "tbdkit.calibrate.stack",
                "gemm-range",
                "--index",
                str(index),
                "--mode",
                mode,
                "--shape",
                ",".join(map(str, shape)),
            ]
            try:
                proc = run(cmd, capture_output=True, text=True, env=env, timeout=NCU_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                out.append(gap(f"the ncu pass did not finish in {NCU_TIMEOUT_S:.0f} s"))
                continue
            rep = report.with_suffix(".ncu-rep")
            if proc.returncode != 0 or not rep.is_file():
                out.append(gap(ncu.failure(proc.returncode, proc.stdout + proc.stderr)))
                continue
            raw = run(ncu.import_args(exe, rep), capture_output=True, text=True)
        out.append(ncu_result_from_csv(mode, *shape, raw.stdout))
    return out
