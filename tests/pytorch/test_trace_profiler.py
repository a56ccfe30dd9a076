"""The torch profiler's events land on the training loop's clock in trace.json: a real profile on the
CPU (only the CUDA activity and sync are left out), anchored by tbdkit's annotation."""

from __future__ import annotations

import time

import pytest
import torch
from torch.profiler import ProfilerActivity, record_function

from tbdkit.adapters.pytorch_analysis import chrome_trace
from tbdkit.agent.analysis import _keep_profiler_trace
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
