"""The machinery check's stack (framework `numpy`, model `mlp_numpy`): a real small training stack in the kit's
own environment. Benched through the CLI as a user types it, it trains (the loss falls), measures its window and
writes a complete run folder; its adapter refuses what it cannot do in one sentence; the training loop and the
sampler read the clock they are handed, so a test can drive time."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from model_checks import tbdkit
from run_invariants import assert_run_holds
from tbdkit.results.summary import MEASURED

MACHINERY = ["--model", "mlp_numpy", "--framework", "numpy", "--preset", "smoke", "--max-warmup-s", "0.3",
             "--max-measure-s", "0.3"]  # fmt: skip


def test_the_machinery_stack_benches_through_the_cli(tmp_path):
    proc = tbdkit("bench", *MACHINERY, "--results", str(tmp_path / "res"), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads(proc.stdout)
    assert (row["model"], row["framework"], row["status"] in MEASURED) == ("mlp_numpy", "numpy", True), row
    (run,) = [p for p in (tmp_path / "res").iterdir() if p.is_dir()]
    summary = assert_run_holds(run, indexed=True)  # every file, counts, units, the index row (run_invariants)
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


def test_a_data_parallel_job_of_the_machinery_stack_averages_its_gradients(tmp_path):
    """Two workers through the native launcher (processes of their own, the control channel between them): the
    job's throughput is the sum of the workers', the gradient exchange is timed, each worker writes its rows."""
    proc = tbdkit("bench", *MACHINERY, "--batch", "8", "--gpus-per-node", "2", "--results", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (summary,) = json.loads(proc.stdout)
    m = summary["metrics"]
    assert summary["world_size"] == 2 and summary["status"] in MEASURED, summary.get("error")
    assert m["aggregate_throughput"]["value"] == pytest.approx(sum(m["aggregate_throughput"]["per_worker"]), rel=1e-4)
    assert m["communication_time"]["value"] > 0 and "control channel" in m["communication_time"]["method"]
    assert "it follows the backward pass" in m["communication_time"]["method"]  # the exchange is not overlapped
    assert "control channel" in summary["interconnect"]["backend"]
    run = tmp_path / summary["run_id"]
    assert (run / "workers" / "rank1" / "iterations.csv").read_text().count(",measure,") >= 1
    assert assert_run_holds(run, indexed=True)["world_size"] == 2  # and each worker's folder as a run of its own


def test_the_workers_step_with_the_mean_of_their_gradients():
    """In-process, two adapters whose exchange is a two-party gather: after a step on different batches their
    parameters are equal, and equal to one model's after a step on both batches."""
    import threading

    from tbdkit.adapters import numpy as adapter
    from tbdkit.spec import catalog

    model = catalog.get("mlp_numpy")
    hp, workload = model.hp("smoke"), catalog.load_module(model, "numpy")
    data = catalog.load_module(model, "data")
    barrier, slots = threading.Barrier(2), [None, None]

    def gather_as(rank):
        def gather(value):
            slots[rank] = value
            barrier.wait()
            return list(slots)
        return gather

    workers = [adapter.make(workload=workload, hp=hp, device="cpu", precision="fp32", seed=0) for _ in range(2)]
    for rank, a in enumerate(workers):
        a.use_channel(gather_as(rank))
        a.join(2)
    batches = [a.prepare(next(data.batches("synthetic", hp, 8, seed))) for a, seed in zip(workers, (1, 2))]
    threads = [threading.Thread(target=a.step, args=(b,)) for a, b in zip(workers, batches)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    one, two = (list(a.training.model.parameters()) for a in workers)
    assert all(np.array_equal(p, q) for p, q in zip(one, two))
    assert workers[0].comm.seconds > 0
    # the mean of two equal batches' mean gradients is the gradient over their union: one model, both batches
    single = adapter.make(workload=workload, hp=hp, device="cpu", precision="fp32", seed=0)
    single.step({k: np.concatenate([b[k] for b in batches]) for k in batches[0]})
    assert all(np.allclose(p, q, rtol=0, atol=1e-6) for p, q in zip(one, single.training.model.parameters()))
    alone = adapter.make(workload=workload, hp=hp, device="cpu", precision="fp32", seed=0)
    alone.step(batches[0])  # a worker that did not average would have stepped like this
    assert not all(np.allclose(p, q, rtol=0, atol=1e-6) for p, q in zip(one, alone.training.model.parameters()))
