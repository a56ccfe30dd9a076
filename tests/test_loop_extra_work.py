"""Secondary throughput counts (Batch.extra_work, e.g. tokens beside sentences) become
`<name>_throughput` metrics; batches without them give exactly the metrics they gave before."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import pytest

from tbdkit.agent.loop import TrainingLoop, extra_work, throughput_metrics
from tbdkit.spec.run_spec import MeasurePolicy

POLICY = MeasurePolicy(min_warmup_iterations=1, warmup_window=2, max_warmup_iterations=2,
                       min_measure_iterations=4, max_measure_iterations=6, target_ci=1e-9)


@dataclass
class Plain:
    samples: int = 4
    work: float = 4.0


@dataclass
class Counted(Plain):
    extra_work: dict[str, float] = field(default_factory=lambda: {"tokens": 100.0})


class SleepyAdapter:
    cuda_index = None

    def prepare(self, batch):
        return batch

    def step(self, inputs):
        time.sleep(0.002)
        return 1.0

    def loss_value(self, loss):
        return float(loss)


def _run(batches) -> dict:
    loop = TrainingLoop(SleepyAdapter(), itertools.cycle(batches), POLICY, lambda: False, collectors=[])
    loop.warm_up()
    est = loop.measure()
    window = loop.result.iterations[loop.result.window["first_iteration"]:]
    return {"window": window, "metrics": throughput_metrics(window, est, "sentences/s", "sentences/s",
                                                            {"tokens": "tokens/s"})}


def test_extra_work_reads_the_optional_attribute():
    assert extra_work(Plain()) == {}
    assert extra_work(Counted()) == {"tokens": 100.0}
    assert extra_work(Counted(extra_work={"tokens": 7, "frames": 2})) == {"tokens": 7.0, "frames": 2.0}


def test_tokens_throughput_is_tokens_over_window_time():
    out = _run([Counted(extra_work={"tokens": 100.0}), Counted(extra_work={"tokens": 300.0})])
    window, m = out["window"], out["metrics"]
    seconds = sum(i.seconds for i in window)
    tokens = sum(i.extra["tokens"] for i in window)
    assert tokens == 200.0 * len(window)
    t = m["tokens_throughput"]
    assert t["unit"] == "tokens/s" and "extra_work" in t["method"]
    assert t["value"] == pytest.approx(tokens / seconds, rel=1e-5)
    assert m["throughput"]["value"] == pytest.approx(4.0 * len(window) / seconds, rel=1e-5)
    assert window[0].row()["work_tokens"] in (100.0, 300.0)


def test_unit_defaults_to_name_per_second():
    out = _run([Counted(extra_work={"frames": 10.0})])
    assert out["metrics"]["frames_throughput"]["unit"] == "frames/s"
    assert "tokens_throughput" not in out["metrics"]


def test_batches_without_extra_work_keep_the_old_metrics_and_rows():
    out = _run([Plain()])
    assert set(out["metrics"]) == {"throughput", "sample_throughput", "iteration_time", "data_wait"}
    assert list(out["window"][0].row()) == ["iteration", "phase", "start_s", "seconds", "data_wait_s",
                                             "samples", "work", "loss"]
