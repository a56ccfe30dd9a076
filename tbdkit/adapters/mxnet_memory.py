"""MXNet's half of the memory breakdown (paper Fig. 8), taken over one training step after the
sample window:

- weights and weight gradients: the bytes of the arrays Gluon holds for each trainable parameter
  (`Parameter.list_data()`, `Parameter.list_grad()`: MXNet allocates a gradient buffer per
  parameter and keeps it, so the gradients are measured, not copied from the weights);
- feature maps: MXNet's storage profiler (`mx.profiler.set_config(profile_memory=True)`) counts
  the bytes of device storage in use ("Memory: <dev>/<id>" counter events). The storage allocated
  since the step began and still held when a backward pass begins (every backward and
  autograd.grad goes through MXAutogradBackwardEx) is what the recorded graph keeps for backward
  (its activations, the inputs, the loss); the most of it over the step's backward passes is the
  figure. A hybridized block with static_alloc keeps its buffers from step to step, so the
  blocks' cached graphs are cleared before the step: the step plans and allocates them again
  inside the measurement. Python's garbage is collected before the step and the collector is off
  during it: the counter subtracts every free of storage it counted, so arrays an earlier measured
  step left in reference cycles, collected inside this one, would lower its figure;
- dynamic: the Gluon trainers' optimizer state (momentum, moments);
- workspace: null: the counter MXNet exposes does not tell temporary workspace (kTempSpace)
  storage from the rest.
"""

from __future__ import annotations

import contextlib
import gc
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mxnet as mx
import numpy as np

from tbdkit.analysis.memory import entry

DOMAIN = "tbdkit"
START, BACKWARD = "tbdkit step start", "tbdkit backward start"
FEATURE_METHOD = (
    "MXNet storage profiler (profile_memory): the most device storage allocated since the step "
    "began and still held when a backward pass begins (the recorded graph's activations, the "
    "inputs and the loss), over the step's backward passes; hybridized blocks' cached graphs are "
    "cleared before the step so their static buffers are allocated inside it"
)


def array_bytes(arrays: Any) -> int:
    """Bytes of distinct NDArrays (one array listed twice counts once)."""
    seen: dict[int, int] = {}
    for a in arrays:
        seen[id(a)] = int(a.size) * np.dtype(a.dtype).itemsize
    return sum(seen.values())


@contextlib.contextmanager
def _marked_backwards(mark: Callable[[str], None]) -> Iterator[None]:
    """While on, each backward pass (NDArray.backward, autograd.backward, autograd.grad: all call
    MXAutogradBackwardEx) first waits for the engine and marks the trace."""
    lib = mx.base._LIB  # the one ctypes library every MXNet module calls through
    original = lib.MXAutogradBackwardEx

    def backward(*args: Any) -> Any:
        # let the engine finish the forward pass and the frees of its temporaries (a second wait
        # catches frees the first one's completions pushed) before reading the counter's time
        mx.nd.waitall()
        mx.nd.waitall()
        mark(BACKWARD)
        return original(*args)

    lib.MXAutogradBackwardEx = backward
    try:
        yield
    finally:
        lib.MXAutogradBackwardEx = original


def clear_cached_graphs(blocks: list[Any]) -> None:
    """Drop the cached graphs of every hybridized block under `blocks`: the next call traces and
    plans its memory again (with its hybridize flags), so a static_alloc block allocates its buffers
    in that call instead of reusing those of earlier steps."""
    for block in blocks:
        if isinstance(block, mx.gluon.HybridBlock):
            block._clear_cached_op()  # MXNet 1.9.1 (the last release): the cache's one reset
        clear_cached_graphs(list(block._children.values()))


def held_at_backward_starts(events: list[dict[str, Any]], counter: str) -> int | None:
    """From a profiler trace: the most of (counter at a backward start - counter at the step's
    start) over the backward starts; None if the step ran no backward. The counter's value at an
    instant is that of its last event at or before it (0 before its first: it starts with the
    profiler)."""
    samples = sorted(
        (float(e["ts"]), float((e.get("args") or {}).get(counter, 0)))
        for e in events
        if e.get("ph") == "C" and e.get("name") == counter
    )
    marks = sorted((float(e["ts"]), e.get("name")) for e in events if e.get("name") in (START, BACKWARD))

    def value_at(ts: float) -> float:
        got = 0.0
        for t, v in samples:
            if t > ts:
                break
            got = v
        return got

    starts = [t for t, name in marks if name == START]
    if not starts:
        return None
    start = starts[-1]  # the profile holds every measured step of the process: take the last
    backwards = [t for t, name in marks if name == BACKWARD and t >= start]
    if not backwards:
        return None
    base = value_at(start)
    return int(max(0.0, max(value_at(t) - base for t in backwards)))


_TRACE: list[Path] = []  # MXNet's profiler takes its configuration once per process


def _trace_file() -> Path:
    if not _TRACE:
        _TRACE.append(Path(tempfile.mkdtemp(prefix="tbdkit-mxnet-profile-")) / "profile.json")
        mx.profiler.set_config(
            profile_memory=True,
            profile_imperative=True,
            profile_symbolic=True,
            profile_api=False,
            aggregate_stats=False,
            filename=str(_TRACE[0]),
        )
    return _TRACE[0]


def read_trace(text: str) -> list[dict[str, Any]]:
    """The events of a profile dumped with dump(finished=False): MXNet leaves the JSON open (later
    dumps append to it), so it is closed here before parsing."""
    text = text.strip()
    try:
        return json.loads(text).get("traceEvents", [])
    except json.JSONDecodeError:
        return json.loads(text.rstrip(",") + "\n]}").get("traceEvents", [])


def feature_maps(ctx: Any, step: Callable[[], Any], blocks: list[Any]) -> tuple[int | None, str | None]:
    """Run `step` under MXNet's storage profiler, the cached graphs of `blocks` (the workload's
    networks) cleared first; (bytes, None) or (None, why)."""
    counter = f"Memory: {ctx.device_type}/{ctx.device_id}"
    domain = mx.profiler.Domain(DOMAIN)

    def mark(name: str) -> None:
        mx.profiler.Marker(domain, name).mark()

    clear_cached_graphs(blocks)
    # The counter subtracts every free of storage it counted in an earlier measurement: collect the
    # garbage of earlier steps (cycles holding arrays) now, wait for the engine to free it, and keep
    # Python's collector off until the step ends
    collecting = gc.isenabled()
    gc.collect()
    mx.nd.waitall()
    trace = _trace_file()
    gc.disable()
    mx.profiler.set_state("run")
    try:
        mark(START)
        with _marked_backwards(mark):
            step()
        mx.nd.waitall()
    finally:
        mx.profiler.set_state("stop")
        if collecting:
            gc.enable()
        mx.profiler.dump(finished=False)  # finished=True would end the profiler for the process
    got = held_at_backward_starts(read_trace(trace.read_text()), counter)
    if got is None:
        return None, "the step ran no backward pass for the storage profiler to measure at"
    return got, None


def breakdown(
    params: list[Any],
    optimizer_state_bytes: Callable[[], int | None],
    ctx: Any,
    step: Callable[[], Any],
    blocks: list[Any],
) -> dict[str, Any]:
    """The five categories and the peak for memory.json (tbdkit.analysis.memory.breakdown);
    `blocks`: the workload's Gluon networks."""
    fm, why = feature_maps(ctx, step, blocks)
    optimizer_state = optimizer_state_bytes()  # after the step, which creates the state
    weights = array_bytes(a for p in params for a in p.list_data())
    grads = array_bytes(g for p in params if p.grad_req != "null" for g in p.list_grad())
    no_state = "the workload's training state holds no Gluon trainer"
    cats = {
        "weights": entry(weights, "bytes of the trainable parameters' arrays (Parameter.list_data())"),
        "weight_gradients": entry(
            grads, "bytes of the gradient arrays MXNet holds for the trainable parameters (Parameter.list_grad())"
        ),
        "feature_maps": entry(fm, FEATURE_METHOD, why),
        "workspace": entry(
            None,
            "MXNet temporary workspace (kTempSpace)",
            "MXNet 1.9's storage profiler counts device storage as one total: it does not tell "
            "operator workspace from other storage (a forward operator's workspace is released "
            "before backward begins, so it is not in the feature maps)",
        ),
        "dynamic": entry(
            optimizer_state,
            "bytes of the Gluon trainers' optimizer state after the step",
            None if optimizer_state is not None else no_state,
        ),
    }
    peak = entry(
        None,
        "MXNet storage manager peak",
        "MXNet 1.9 has no peak-allocation counter; its storage profiler counts changes since it "
        "started, not the memory in use before (NVML's memory used covers the GPU)",
    )
    return {"categories": cats, "peak": peak}
