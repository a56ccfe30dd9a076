"""The after-window analyses with a stand-in adapter: what lands in memory.json, kernels.csv and
the summary on a CPU run, on a CUDA run with a kernel trace, and when a probe fails."""

from __future__ import annotations

import contextlib
import csv
import json
from types import SimpleNamespace

import pytest

from tbdkit.agent import after_window as analysis
from tbdkit.analysis import memory
from tbdkit.analysis.timeline import Kernel
from tbdkit.results.files import KERNEL_COLUMNS


class Loop:
    def __init__(self) -> None:
        self.phases: list[str] = []

    def one_more(self, phase: str) -> SimpleNamespace:
        self.phases.append(phase)
        return SimpleNamespace(samples=4, work=8.0)


class Adapter:
    framework = "pytorch"

    def __init__(self, cuda_index: int | None = None, fail: bool = False, events_per_step: int = 0,
                 loop: Loop | None = None) -> None:
        self.cuda_index = cuda_index
        self.device_label = "cpu" if cuda_index is None else f"cuda:{cuda_index}"
        self.fail = fail
        self.events_per_step, self.loop = events_per_step, loop

    def memory_breakdown(self, step):
        step()
        if self.fail:
            raise RuntimeError("probe broke")
        cats = {c: memory.entry(100, "fixture") for c in memory.CATEGORIES}
        cats["workspace"] = memory.entry(None, "fixture", "not separable")
        return {"categories": cats, "peak": memory.entry(1000 if self.cuda_index is not None else None, "fixture",
                                                         None if self.cuda_index is not None else "cpu")}

    def count_flops(self, step) -> int:
        step()
        return 4000

    @contextlib.contextmanager
    def kernel_trace(self):
        got: dict = {}
        before = len(self.loop.phases) if self.loop else 0
        yield got
        steps = (len(self.loop.phases) if self.loop else 0) - before
        got["chrome_trace"] = {"traceEvents": [{"ph": "X"}] * (self.events_per_step * steps)}
        got["anchor_perf_s"], got["anchor_uncertainty_s"] = 0.0, 0.0
        got["kernels"] = [Kernel("gemm", 0, 60), Kernel("relu", 50, 20), Kernel("gemm", 90, 10)]
        got["elapsed_us"] = 100.0


def test_cpu_run_writes_memory_and_leaves_gpu_metrics_null(tmp_path) -> None:
    loop = Loop()
    got = analysis.run(Adapter(), loop, {"framework": {}}, tmp_path, {"value": 2.0}, "fp32")
    doc = json.loads((tmp_path / "memory.json").read_text())
    assert doc["unit"] == "bytes" and doc["categories"]["weights"]["bytes"] == 100
    assert doc["unattributed"]["bytes"] is None
    assert got["model_flops_per_sample"]["value"] == 1000.0       # 4000 FLOPs / 4 samples
    assert got["model_flops_per_sample"]["flops_per_work"] == 500.0
    assert got["mfu"]["value"] is None and "CPU" in got["mfu"]["reason"]
    assert got["gpu_utilization_trace"]["value"] is None and "CPU" in got["gpu_utilization_trace"]["reason"]
    for pipe in ("fp32_utilization", "tensor_utilization"):  # every summary holds them, null with why
        assert got[pipe]["value"] is None and "CPU" in got[pipe]["reason"]
    assert not (tmp_path / "kernels.csv").exists()
    assert loop.phases == ["analysis", "analysis"]


def test_cuda_run_writes_the_kernel_table_and_trace_utilization(tmp_path) -> None:
    loop = Loop()
    got = analysis.run(Adapter(cuda_index=0), loop, {"framework": {}}, tmp_path, {"value": 2.0}, "fp32")
    doc = json.loads((tmp_path / "memory.json").read_text())
    assert doc["unattributed"]["bytes"] == 1000 - 400
    assert got["gpu_utilization_trace"]["value"] == pytest.approx(80.0)   # [0,70) + [90,100) of 100 us
    assert got["fp32_utilization"]["value"] is None and "make reference" in got["fp32_utilization"]["reason"]
    rows = list(csv.DictReader((tmp_path / "kernels.csv").open()))
    assert tuple(rows[0]) == KERNEL_COLUMNS
    assert rows[0]["kernel"] == "gemm" and float(rows[0]["time_share"]) == pytest.approx(70 / 90, abs=1e-6)
    assert loop.phases.count("analysis") == 2 + 1 + analysis.TRACE_ITERATIONS  # one iteration to size the trace
    assert got["gpu_utilization_trace"]["iterations"] == analysis.TRACE_ITERATIONS
    launches = list(csv.DictReader((tmp_path / "kernel_launches.csv").open()))   # the timeline ncu samples are weighted by
    assert [(r["kernel"], r["calls"], float(r["total_time_us"])) for r in launches] == [("gemm", "2", 70.0), ("relu", "1", 20.0)]


@pytest.mark.parametrize(("events_per_step", "iterations"), [(10, 5), (60_000, 3), (150_000, 1), (900_000, 1)])
def test_the_kernel_trace_covers_as_many_iterations_as_its_event_bound_allows(tmp_path, events_per_step, iterations) -> None:
    """Deep Speech 2's recurrent layers launch kernels per time step: one iteration on a GPU made a
    profiler trace of about 600,000 events, five of them 900 MB of JSON that took over a minute to export."""
    loop = Loop()
    loop.t0 = 0.0  # type: ignore[attr-defined]  # the loop's clock: the trace is kept beside the run
    adapter = Adapter(cuda_index=0, events_per_step=events_per_step, loop=loop)
    got = analysis.run(adapter, loop, {"framework": {}}, tmp_path, {"value": 2.0}, "fp32")
    util = got["gpu_utilization_trace"]
    assert util["iterations"] == iterations and f"over {iterations} iterations" in util["method"]
    assert loop.phases.count("analysis") == 2 + 1 + (iterations if iterations > 1 else 0)
    kept = json.loads((tmp_path / "profiler_trace.json").read_text())
    assert len(kept["traceEvents"]) == events_per_step * iterations <= max(analysis.MAX_TRACE_EVENTS, events_per_step)


def test_a_failing_probe_leaves_null_with_reason(tmp_path) -> None:
    analysis.run(Adapter(fail=True), Loop(), {"framework": {}}, tmp_path, {"value": 2.0}, "fp32")
    doc = json.loads((tmp_path / "memory.json").read_text())
    assert all(c["bytes"] is None and "probe broke" in c["reason"] for c in doc["categories"].values())


def test_frameworks_without_probes_get_weights_from_their_variables(tmp_path) -> None:
    adapter = SimpleNamespace(framework="tensorflow", cuda_index=None, device_label="cpu",
                              model_info=lambda: {"parameter_bytes": 4096})
    got = analysis.run(adapter, Loop(), {"framework": {}}, tmp_path, {"value": 2.0}, "fp32")
    cats = json.loads((tmp_path / "memory.json").read_text())["categories"]
    assert cats["weights"]["bytes"] == 4096
    assert cats["weight_gradients"]["bytes"] is None and "tensorflow" in cats["weight_gradients"]["reason"]
    assert cats["feature_maps"]["bytes"] is None and "tensorflow" in cats["feature_maps"]["reason"]
    assert got["model_flops_per_sample"]["value"] is None


def test_out_of_memory_in_an_analysis_keeps_the_measured_run(tmp_path) -> None:
    class OomAdapter(Adapter):
        def count_flops(self, step) -> int:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    got = analysis.run(OomAdapter(), Loop(), {"framework": {}}, tmp_path, {"value": 2.0}, "fp32")
    assert got["model_flops_per_sample"]["value"] is None and "out of memory" in got["model_flops_per_sample"]["reason"]
    assert got["mfu"]["value"] is None


def test_the_profiled_pass_runs_n_iterations_inside_the_profiler_range(monkeypatch) -> None:
    from tbdkit.agent import run

    monkeypatch.setenv(run.PROFILE_ENV, "2")
    assert run.profile_iterations() == 2
    monkeypatch.setenv(run.PROFILE_ENV, "two")
    assert run.profile_iterations() == 0
    seen: list[str] = []

    class Profiled(Adapter):
        @contextlib.contextmanager
        def profiler_range(self):
            seen.append("start")
            yield
            seen.append("stop")

    class RecordingLoop(Loop):
        def one_more(self, phase: str):
            seen.append(phase)
            return super().one_more(phase)

    summary: dict = {}
    run._profiled_pass(Profiled(), RecordingLoop(), 2, summary)
    assert seen == ["start", "profiled", "profiled", "stop"]
    assert summary == {"profiled_iterations": 2, "metrics": {}}
    with pytest.raises(RuntimeError, match="no profiler"):
        run._profiled_pass(Adapter(), Loop(), 1, {})


def test_an_optimizer_state_probe_fills_dynamic(tmp_path) -> None:
    adapter = SimpleNamespace(framework="mxnet", cuda_index=None, device_label="cpu",
                              model_info=lambda: {"parameter_bytes": 4096}, optimizer_state_bytes=lambda: 4096)
    analysis.run(adapter, Loop(), {"framework": {}}, tmp_path, {"value": 2.0}, "fp32")
    dynamic = json.loads((tmp_path / "memory.json").read_text())["categories"]["dynamic"]
    assert dynamic["bytes"] == 4096 and dynamic["reason"] is None and "optimizer" in dynamic["method"]
    assert "not counted" in dynamic["method"]
