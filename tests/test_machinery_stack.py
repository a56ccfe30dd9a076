"""The machinery check's stack (framework `numpy`, model `mlp_numpy`): a real small training stack in the kit's
own environment. Benched through the CLI as a user types it, it trains (the loss falls), measures its window and
writes a complete run folder; its adapter refuses what it cannot do in one sentence; the training loop and the
sampler read the clock they are handed, so a test can drive time."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import pytest

from model_checks import tbdkit
from tbdkit.results.summary import MEASURED

MACHINERY = ["--model", "mlp_numpy", "--framework", "numpy", "--preset", "smoke", "--max-warmup-s", "0.3",
             "--max-measure-s", "0.3"]  # fmt: skip


def test_the_machinery_stack_benches_through_the_cli(tmp_path):
    proc = tbdkit("bench", *MACHINERY, "--results", str(tmp_path / "res"), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads(proc.stdout)
    assert (row["model"], row["framework"], row["status"] in MEASURED) == ("mlp_numpy", "numpy", True), row
    (run,) = [p for p in (tmp_path / "res").iterdir() if p.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    env = json.loads((run / "env.json").read_text())
    assert summary["model_info"]["parameters"] == 32 * 64 + 64 + 64 * 10 + 10
    assert summary["loss"]["last"] < summary["loss"]["first"]  # a real network that learns its batches
    m = summary["metrics"]
    with (run / "iterations.csv").open() as f:
        window = [r for r in csv.DictReader(f) if r["phase"] == "measure"]
    seconds, samples = sum(float(r["seconds"]) for r in window), sum(int(r["samples"]) for r in window)
    assert m["throughput"]["unit"] == "samples/s"
    assert m["throughput"]["value"] == pytest.approx(samples / seconds, rel=1e-3)  # work / seconds of the window
    assert m["framework_peak_allocated"]["value"] > 0 and "tracemalloc" in m["framework_peak_allocated"]["method"]
    assert m["framework_peak_reserved"]["value"] is None and m["framework_peak_reserved"]["reason"]
    assert env["framework"]["framework"] == "numpy" and env["framework"]["math_mode"]["mode"] == "fp32"


def test_the_machinery_stack_refuses_what_it_has_not(tmp_path):
    from tbdkit.adapters import capabilities, numpy as adapter
    from tbdkit.spec import catalog

    model = catalog.get("mlp_numpy")
    workload = catalog.load_module(model, "numpy")
    make = dict(workload=workload, hp=model.hp("smoke"), device="cpu", seed=0)
    with pytest.raises(RuntimeError, match="float32 only"):
        adapter.make(**make, precision="bf16")
    with pytest.raises(RuntimeError, match="no graph compiler"):
        adapter.make(**make, precision="fp32", graph="compiled")
    with pytest.raises(RuntimeError, match="CPU only"):
        adapter.make(**{**make, "device": "cuda:0"}, precision="fp32")
    caps = capabilities(adapter.make(**make, precision="fp32"))
    assert caps.graph_compile is None and caps.kernel_trace is None and caps.distributed is None
    assert caps.parameter_sync is not None and caps.peak_reset is not None


class StepClock:
    """A clock that stands still except while the adapter steps: each step takes `step_s` on it."""

    def __init__(self, adapter, step_s: float) -> None:
        self.now, self.step_s, self._step = 0.0, step_s, adapter.step
        adapter.step = self.step

    def step(self, inputs):
        self.now += self.step_s
        return self._step(inputs)

    def __call__(self) -> float:
        return self.now


def test_the_loop_and_the_sampler_read_the_clock_they_are_handed():
    from tbdkit.adapters import numpy as adapter
    from tbdkit.agent.collectors import Sampler
    from tbdkit.agent.loop import TrainingLoop, synthetic_pool
    from tbdkit.spec import catalog
    from tbdkit.spec.run_spec import MeasurePolicy

    model = catalog.get("mlp_numpy")
    hp = model.hp("smoke")
    a = adapter.make(workload=catalog.load_module(model, "numpy"), hp=hp, device="cpu", precision="fp32", seed=0)
    clock = StepClock(a, 0.25)
    policy = MeasurePolicy(min_measure_iterations=3, max_measure_iterations=50, max_warmup_iterations=2,
                           min_warmup_iterations=1, max_measure_s=1.0)  # fmt: skip
    batches = synthetic_pool(catalog.load_module(model, "data").batches("synthetic", hp, 8, 0), 2)
    loop = TrainingLoop(a, batches, policy, lambda: False, sampler=Sampler([], 3600, clock), clock=clock)
    loop.warm_up()
    estimate = loop.measure()
    window = loop.result.iterations[loop.result.window["first_iteration"] :]
    # every iteration is its step's 0.25 s on this clock, and nothing else moves it: 8 samples / 0.25 s
    assert [(i.seconds, i.data_wait_s) for i in loop.result.iterations] == [(0.25, 0.0)] * 5
    assert estimate.throughput == 32.0 and loop.result.warmup["seconds"] == 0.5
    assert (len(window), loop.result.window["seconds"], loop.result.window["stop_reason"]) == (3, 0.75, "converged")
    assert loop.result.window["samples_origin_s"] == 0.5  # the sampler started on the loop's clock, after warm-up
