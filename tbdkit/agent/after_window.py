"""The analyses taken after the sample window, in extra iterations of their own (phase
'analysis' in iterations.csv), so nothing they cost falls inside the timed window:

- memory.json: the paper's memory breakdown (Fig. 8)
- model FLOPs per sample, the device's peak FLOP/s for the math mode that ran, and MFU
- on CUDA, a torch.profiler kernel trace over a few iterations: GPU utilization from the
  kernel timeline (eq. 1), kernels.csv (time shares per kernel) and kernel_launches.csv (calls
  and time per kernel and launch configuration, which weight the ncu samples of `make reference`)

Each step that cannot run here, or fails, leaves its metrics null with the reason; the run
itself still completes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tbdkit.adapters import Capabilities, capabilities
from tbdkit.analysis import memory as memory_doc
from tbdkit.analysis.peak import MIXED_WITH, Device, mfu_metric, peak_metric
from tbdkit.analysis.timeline import LAUNCH_COLUMNS, chrome_events, kernel_table, launch_table, utilization
from tbdkit.analysis.trace import ANCHOR_EVENT
from tbdkit.core.metric import metric, missing
from tbdkit.env.nvml import nvml_handle
from tbdkit.results import files as runfiles
from tbdkit.results import sink
from tbdkit.results.rundir import RunDir

log = logging.getLogger("tbdkit.agent")

TRACE_ITERATIONS = 5
# The profiler's events a trace may hold (one iteration's always fits): a few hundred bytes each in
# profiler_trace.json, all held in memory while it is exported, read and rewritten.
MAX_TRACE_EVENTS = 200_000
TRACE_METHOD = (
    "torch.profiler CUDA trace over {n} iterations after the sample window (up to "
    f"{TRACE_ITERATIONS}, as many as keep the trace within {MAX_TRACE_EVENTS:,} profiler events, "
    "at least one): union of kernel intervals / traced wall time (paper eq. 1)"
)
FLOPS_METHOD = (
    "torch.utils.flop_counter.FlopCounterMode over one training step (forward + backward) / samples in its batch"
)


def device_of(env: dict[str, Any], cuda_index: int | None) -> tuple[Device | None, str | None]:
    """The GPU's SM count and compute capability (from the framework) and max SM clock (NVML)."""
    if cuda_index is None:
        return None, "the run is on the CPU: there is no GPU peak to compare against"
    props = env.get("framework", {}).get("device_properties") or {}
    if not props.get("sm_count") or not props.get("compute_capability"):
        return None, "the framework did not report the GPU's SM count and compute capability"
    try:
        import pynvml

        pynvml.nvmlInit()
        handle, _ = nvml_handle(pynvml, cuda_index, props.get("uuid"), props.get("pci_bus_id"))
        clock = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception as exc:
        return None, f"NVML could not report the maximum SM clock ({type(exc).__name__}: {exc})"
    name = env.get("framework", {}).get("device_name", "gpu")
    return Device(
        name,
        props["compute_capability"],
        int(props["sm_count"]),
        clock,
        "NVML nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)",
    ), None


def fallback_memory(adapter: Any, caps: Capabilities) -> dict[str, Any]:
    """An adapter without a memory probe of its own: weights from its variables; gradients and the
    rest are null with the reason (a gradient is never assumed to be the size of its weight: sparse
    and frozen parameters break that)."""
    info = adapter.model_info()
    weights = info.get("parameter_bytes")
    why = f"{adapter.framework}: tbdkit has no probe for this category on this framework"
    entry = memory_doc.entry
    cats = {
        "weights": entry(weights, "bytes of the trainable variables", None if weights is not None else why),
        "weight_gradients": entry(None, "gradient tensors as the framework holds them", why),
        "feature_maps": entry(None, "tensors held for backward", why),
        "workspace": entry(None, "library workspaces", why),
        "dynamic": _optimizer_state(adapter, why, caps),
    }
    return {"categories": cats, "peak": entry(None, "allocator peak", why)}


def _optimizer_state(adapter: Any, why: str, caps: Capabilities) -> dict[str, Any]:
    """The optimizer's state (momentum buffers, moments) from its own variables, once the steps made it;
    the rest of what iterations allocate is not measurable without the framework's allocator."""
    state = caps.optimizer_state.optimizer_state_bytes() if caps.optimizer_state is not None else None
    if state is None:
        return memory_doc.entry(None, "optimizer state", why)
    return memory_doc.entry(
        state,
        f"{adapter.framework}: bytes of the optimizer's state variables after the "
        "measured steps (other allocations made during iterations are not counted)",
    )


def run(
    adapter: Any,
    loop: Any,
    env: dict[str, Any],
    run_dir: Path,
    throughput: dict[str, Any],
    math_mode: str,
    caps: Capabilities | None = None,
) -> dict[str, dict[str, Any]]:
    """Take the analyses, write memory.json (and kernels.csv on CUDA); return the summary metrics.
    `caps`: the adapter's capabilities where the caller has checked them already."""
    caps = caps if caps is not None else capabilities(adapter)
    metrics: dict[str, dict[str, Any]] = {}
    last: dict[str, Any] = {}

    def step() -> None:
        last["it"] = loop.one_more("analysis")

    metrics.update(_memory(adapter, caps, step, run_dir))
    metrics.update(_flops(adapter, caps, step, last, env, throughput, math_mode))
    metrics.update(_trace(adapter, caps, step, run_dir, getattr(loop, "t0", None)))
    metrics.update(_pipe_utilization(adapter))
    return metrics


def _keep_profiler_trace(run_dir: Path, got: dict[str, Any], loop_t0: float) -> None:
    doc = got["chrome_trace"]
    doc = dict(doc) if isinstance(doc, dict) else {"traceEvents": doc}
    doc["tbdkit_clock"] = {
        "anchor_event": ANCHOR_EVENT,
        "anchor_loop_s": round(got["anchor_perf_s"] - loop_t0, 6),
        "uncertainty_s": round(got["anchor_uncertainty_s"], 6),
        "method": "the anchor annotation's midpoint, recorded between two time.perf_counter() reads, is this "
        "time on the training loop's clock (iterations.csv's start_s)",
    }
    sink.write_json(run_dir / runfiles.PROFILER_TRACE, doc)


def _pipe_utilization(adapter: Any) -> dict[str, dict[str, Any]]:
    """FP32 and tensor-core utilization (paper eq. 2) come from an Nsight Compute replay of the
    kernels, which a bench run does not do: every summary holds them as null with the reason;
    `make reference` (tbdkit.bench.reference) replaces them with its ncu pass's values."""
    reason = (
        "the run is on the CPU: FP32 and tensor-core pipe utilization are read by Nsight Compute on NVIDIA GPUs"
        if adapter.cuda_index is None
        else "a bench run does not replay its kernels under Nsight Compute: `make reference` adds these from its ncu pass"
    )
    return {
        "fp32_utilization": missing(
            "%", "Nsight Compute: FP32 FLOPs / (peak FP32 FLOP/s x kernel time), paper eq. 2", reason
        ),
        "tensor_utilization": missing("%", "Nsight Compute: tensor pipe active, kernel-time-weighted", reason),
    }


def _guard(name: str, fn: Callable[[], Any], fallback: Callable[[str], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # an analysis that fails is a gap in the results, never a failed run
        if type(exc).__name__ == "StopRequested":
            raise
        log.warning("%s analysis failed: %s: %s", name, type(exc).__name__, exc)
        return fallback(f"the {name} analysis failed ({type(exc).__name__}: {exc})")


def memory_breakdown(adapter: Any, caps: Capabilities, step: Callable[[], None]) -> dict[str, Any]:
    """memory.json's categories and peak ({"categories", "peak"}) over `step` (one training step): the adapter's
    probe, or fallback_memory where it has none. Raises what the probe raised (the run's analysis guards it;
    `tbdkit check-workload`'s analyses check reports it)."""
    if caps.memory_breakdown is not None:
        return caps.memory_breakdown.memory_breakdown(step)
    return fallback_memory(adapter, caps)


def step_flops(adapter: Any, caps: Capabilities, step: Callable[[], None]) -> tuple[int | None, str | None]:
    """The model FLOPs of `step` (one training step) by the adapter's counter, and None; or None and why this
    framework has no counter. Raises what the counter raised (guarded as memory_breakdown is)."""
    if caps.flop_count is None:
        return None, f"{adapter.framework}: tbdkit counts model FLOPs only on PyTorch so far"
    return caps.flop_count.count_flops(step), None


def _memory(adapter: Any, caps: Capabilities, step: Callable[[], None], run_dir: Path) -> dict[str, dict[str, Any]]:
    def failed(reason: str) -> dict[str, Any]:
        e = memory_doc.entry
        return {
            "categories": {c: e(None, "not measured", reason) for c in memory_doc.CATEGORIES},
            "peak": e(None, "not measured", reason),
        }

    got = _guard("memory", lambda: memory_breakdown(adapter, caps, step), failed)
    RunDir(run_dir).write_json(
        runfiles.MEMORY, memory_doc.breakdown(adapter.device_label, got["categories"], got["peak"])
    )
    return {}


def _flops(
    adapter: Any,
    caps: Capabilities,
    step: Callable[[], None],
    last: dict[str, Any],
    env: dict[str, Any],
    throughput: dict[str, Any],
    math_mode: str,
) -> dict[str, dict[str, Any]]:
    device, why = device_of(env, adapter.cuda_index)
    peak = peak_metric(device, math_mode, why)
    out: dict[str, dict[str, Any]] = {}

    def count() -> tuple[float, float] | str:
        flops, no_counter = step_flops(adapter, caps, step)
        if flops is None:
            return str(no_counter)
        it = last["it"]
        return flops / it.samples, flops / it.work

    got = _guard("FLOP count", count, lambda reason: reason)
    if isinstance(got, str):  # no counter on this framework, or it failed: null with the reason
        out["model_flops_per_sample"] = missing("FLOP/sample", FLOPS_METHOD, got)
        out["mfu"] = mfu_metric(None, None, peak, got)
        return out
    per_sample, per_work = got
    out["model_flops_per_sample"] = metric(per_sample, "FLOP/sample", FLOPS_METHOD, flops_per_work=per_work)
    other = MIXED_WITH.get(math_mode)
    other_peak = peak_metric(device, other, why) if other else None
    out["mfu"] = mfu_metric(per_work, throughput.get("value"), peak, other_peak=other_peak)
    return out


def trace_iterations(events_per_iteration: int) -> int:
    """How many iterations the kernel trace covers: TRACE_ITERATIONS, fewer where they would pass
    MAX_TRACE_EVENTS (Deep Speech 2's recurrent layers launch kernels per time step: hundreds of
    thousands of events in one iteration), and never under one."""
    return max(1, min(TRACE_ITERATIONS, MAX_TRACE_EVENTS // max(1, events_per_iteration)))


def _trace(
    adapter: Any, caps: Capabilities, step: Callable[[], None], run_dir: Path, loop_t0: float | None = None
) -> dict[str, dict[str, Any]]:
    method = TRACE_METHOD.format(n=TRACE_ITERATIONS)
    tracer = caps.kernel_trace
    if adapter.cuda_index is None or tracer is None:
        reason = (
            "the run is on the CPU: there are no GPU kernels to trace"
            if adapter.cuda_index is None
            else f"{adapter.framework}: tbdkit traces kernels only on PyTorch so far"
        )
        return {"gpu_utilization_trace": missing("%", method, reason)}

    traced = tracer  # narrowed: the closure below sees it as not None

    def trace() -> dict[str, dict[str, Any]]:
        with traced.kernel_trace() as got:  # one iteration first: how many events does one make?
            step()
        n = trace_iterations(len(chrome_events(got.get("chrome_trace"))))
        if n > 1:
            with traced.kernel_trace() as got:
                for _ in range(n):
                    step()
        method_n = TRACE_METHOD.format(n=n)
        kernels = got["kernels"]
        if loop_t0 is not None and "chrome_trace" in got:  # merged into trace.json on the loop's clock
            _keep_profiler_trace(run_dir, got, loop_t0)
        if not kernels:
            return {"gpu_utilization_trace": missing("%", method_n, "the trace held no CUDA kernels")}
        source = f"torch.profiler CUDA trace, {n} iterations after the window"
        rows = kernel_table(kernels, source)
        RunDir(run_dir).write_csv(runfiles.KERNELS, [{c: r[c] for c in runfiles.KERNEL_COLUMNS} for r in rows])
        # the timeline by launch configuration, which weights Nsight Compute's samples (tbdkit.bench.reference)
        RunDir(run_dir).write_csv(
            runfiles.KERNEL_LAUNCHES, [{c: r[c] for c in LAUNCH_COLUMNS} for r in launch_table(kernels, source)]
        )
        return {
            "gpu_utilization_trace": metric(
                utilization(kernels, got["elapsed_us"]),
                "%",
                method_n,
                iterations=n,
                kernels=len(kernels),
                traced_us=round(got["elapsed_us"], 1),
            )
        }

    return _guard("kernel trace", trace, lambda reason: {"gpu_utilization_trace": missing("%", method, reason)})
