"""The torch profiler's events land on the training loop's clock in trace.json: a real profile on the
CPU (only the CUDA activity and sync are left out), anchored by tbdkit's annotation."""

from __future__ import annotations

import time

import pytest
import torch
from torch.profiler import ProfilerActivity, record_function

from tbdkit.adapters.pytorch_profiling import chrome_trace
from tbdkit.agent.after_window import _keep_profiler_trace
from tbdkit.analysis import trace
from tbdkit.results import files as runfiles


def test_profiled_events_fall_where_the_loop_clock_saw_them(tmp_path) -> None:
    loop_t0 = time.perf_counter() - 2.0  # the loop started 2 s ago
    x = torch.randn(256, 256)
    with chrome_trace([ProfilerActivity.CPU], lambda: None) as got:
        time.sleep(0.05)  # a gap the alignment must keep: the step starts 50 ms after the anchor
        before = time.perf_counter()
        with record_function("tbdkit-test-step"):
            for _ in range(20):
                x = torch.tanh(x @ x)
        after = time.perf_counter()
    _keep_profiler_trace(tmp_path, got, loop_t0)
    assert (tmp_path / runfiles.PROFILER_TRACE).is_file()
    doc = trace.build(tmp_path, {"run_id": "r", "window": {}})
    assert "profiler" not in doc["otherData"]
    (step,) = [e for e in doc["traceEvents"] if e.get("name") == "tbdkit-test-step" and e.get("ph") == "X"]
    slack_us = 200 + got["anchor_uncertainty_s"] * 1e6  # the profiler's own enter/exit cost on a loaded machine
    assert step["ts"] >= (before - loop_t0) * 1e6 - slack_us
    assert step["ts"] + step["dur"] <= (after - loop_t0) * 1e6 + slack_us
    assert step["ts"] == pytest.approx((before - loop_t0) * 1e6, abs=slack_us + 1000)


def test_the_kernel_trace_keeps_its_chrome_trace_and_leaves_the_anchor_out_of_the_span(monkeypatch) -> None:
    """kernel_trace as a CUDA run calls it (CPU and CUDA activities), with only the GPU's synchronize
    replaced: no kernels here, the profiler's trace and its anchor kept for trace.json."""
    from tbdkit.adapters import pytorch_profiling

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    from tbdkit.analysis import timeline

    seen: list[list[dict]] = []
    original = timeline.from_chrome_trace

    def spy(doc):
        seen.append(doc)
        return original(doc)

    monkeypatch.setattr(timeline, "from_chrome_trace", spy)
    x = torch.randn(64, 64)
    with pytorch_profiling.kernel_trace(torch.device("cpu")) as got:
        for _ in range(3):
            x = x @ x
    assert got["kernels"] == [] and got["elapsed_us"] > 0
    events = got["chrome_trace"]["traceEvents"]
    assert [e for e in events if e.get("name") == trace.ANCHOR_EVENT]
    assert seen and not [e for e in seen[0] if e.get("name") == trace.ANCHOR_EVENT]
    assert 0 <= got["anchor_uncertainty_s"] < 1 and got["anchor_perf_s"] <= time.perf_counter()
