"""MXNet's half of the memory breakdown (paper Fig. 8), taken over one training step after the
sample window:

- weights and weight gradients: the bytes of the arrays Gluon holds for each trainable parameter
  (`Parameter.list_data()`, `Parameter.list_grad()`: MXNet allocates a gradient buffer per
  parameter and keeps it, so the gradients are measured, not copied from the weights);
- feature maps: MXNet's storage profiler (`mx.profiler.set_config(profile_memory=True)`) counts
  the bytes of device storage in use ("Memory: <dev>/<id>" counter events). The storage allocated
  since the step began and still held when an `autograd.record()` scope closes is what the
  recorded graph keeps for backward (its activations, and the loss); the most of it over the
  step's record scopes is the figure;
- dynamic: the Gluon trainers' optimizer state (momentum, moments);
- workspace: null: the counter MXNet exposes does not tell temporary workspace (kTempSpace)
  storage from the rest.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mxnet as mx
import numpy as np

from tbdkit.analysis.memory import entry

DOMAIN = "tbdkit"
START, RECORD_END = "tbdkit step start", "tbdkit record end"
FEATURE_METHOD = (
    "MXNet storage profiler (profile_memory): the most device storage allocated since the step "
    "began and still held when an autograd.record() scope closes (the recorded graph's "
    "activations and the loss), over the step's record scopes"
)


def array_bytes(arrays: Any) -> int:
    """Bytes of distinct NDArrays (one array listed twice counts once)."""
    seen: dict[int, int] = {}
    for a in arrays:
        seen[id(a)] = int(a.size) * np.dtype(a.dtype).itemsize
    return sum(seen.values())


@contextlib.contextmanager
def _marked_record_scopes(mark: Callable[[str], None]) -> Iterator[None]:
    """While on, each autograd.record() scope that closes waits for the engine and marks the trace."""
    scope = mx.autograd._RecordingStateScope  # the class autograd.record() returns (MXNet 1.9.1 is final)
    original = scope.__exit__

    def exit_(self: Any, *exc: Any) -> Any:
        out = original(self, *exc)
        if self._enter_is_record:
            # let the engine run the frees of what the scope dropped (a second wait catches frees
            # the first one's completions pushed) before reading the counter's time
            mx.nd.waitall()
            mx.nd.waitall()
            mark(RECORD_END)
        return out

    scope.__exit__ = exit_
    try:
        yield
    finally:
        scope.__exit__ = original


def held_at_record_ends(events: list[dict[str, Any]], counter: str) -> int | None:
    """From a profiler trace: the most of (counter at a record-scope end - counter at the step's
    start) over the record ends; None if the step recorded nothing. The counter's value at an
    instant is that of its last event at or before it (0 before its first: it starts with the
    profiler)."""
    samples = sorted(
        (float(e["ts"]), float((e.get("args") or {}).get(counter, 0)))
        for e in events
        if e.get("ph") == "C" and e.get("name") == counter
    )
    marks = sorted((float(e["ts"]), e.get("name")) for e in events if e.get("name") in (START, RECORD_END))

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
    ends = [t for t, name in marks if name == RECORD_END and t >= start]
    if not ends:
        return None
    base = value_at(start)
    return int(max(0.0, max(value_at(t) - base for t in ends)))


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


def feature_maps(ctx: Any, step: Callable[[], Any]) -> tuple[int | None, str | None]:
    """Run `step` under MXNet's storage profiler; (bytes, None) or (None, why)."""
    counter = f"Memory: {ctx.device_type}/{ctx.device_id}"
    domain = mx.profiler.Domain(DOMAIN)

    def mark(name: str) -> None:
        mx.profiler.Marker(domain, name).mark()

    mx.nd.waitall()
    trace = _trace_file()
    mx.profiler.set_state("run")
    try:
        mark(START)
        with _marked_record_scopes(mark):
            step()
        mx.nd.waitall()
    finally:
        mx.profiler.set_state("stop")
        mx.profiler.dump(finished=False)  # finished=True would end the profiler for the process
    got = held_at_record_ends(read_trace(trace.read_text()), counter)
    if got is None:
        return None, "the step opened no autograd.record() scope for the storage profiler to measure"
    return got, None


def breakdown(
    params: list[Any], optimizer_state_bytes: Callable[[], int | None], ctx: Any, step: Callable[[], Any]
) -> dict[str, Any]:
    """The five categories and the peak for memory.json (tbdkit.analysis.memory.breakdown)."""
    fm, why = feature_maps(ctx, step)
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
            "operator workspace from other storage (it is part of the feature-map window's "
            "transients, not of what the graph holds)",
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
