"""The converge preset's loop (tbdkit/agent/converge.py) on a stand-in adapter whose held-out
quality follows a known schedule: the curve, the target, the cap, an interruption, the summary."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from tbdkit.spec import run_spec as specs
from tbdkit.agent import converge
from tbdkit.core.errors import UserError


@dataclass
class Batch:
    samples: int

    @property
    def work(self) -> float:
        """Two units of the throughput's work per sample (as A3C's 4 frames per agent step)."""
        return 2.0 * self.samples


@dataclass
class Task:
    train: Iterator[Batch]
    held_out: list[Batch]
    description: str = "a stand-in task"


class Data:
    """quality() returns the next value of `schedule` at each evaluation."""

    def __init__(self, schedule: list[float]) -> None:
        self.schedule = iter(schedule)

    def convergence_task(self, source: str, hp: dict[str, Any], batch_size: int, seed: int) -> Task:
        def batches() -> Iterator[Batch]:
            while True:
                yield Batch(batch_size)
        return Task(batches(), [Batch(30), Batch(20)])

    def quality(self, outputs: list[Any], held_out: list[Batch]) -> float:
        assert len(outputs) == len(held_out)
        return next(self.schedule)


@dataclass
class Adapter:
    """Each step advances a fake clock by `step_s`; losses fall."""
    step_s: float
    steps: int = 0
    clock: list[float] = field(default_factory=lambda: [0.0])

    def prepare(self, batch: Any) -> Any:
        return batch

    def step(self, inputs: Any) -> float:
        self.steps += 1
        self.clock[0] += self.step_s
        return 1.0 / self.steps

    def loss_value(self, loss: float) -> float:
        return loss

    def infer(self, inputs: Any) -> str:
        return "logits"


HP = {"target": 0.9, "quality_metric": "accuracy", "eval_every_s": 1.0, "max_train_s": 5.0}


@pytest.fixture
def fake_clock(monkeypatch) -> list[float]:
    clock = [0.0]
    monkeypatch.setattr(converge.time, "perf_counter", lambda: clock[0])
    return clock


def run(tmp_path: Path, schedule: list[float], fake_clock: list[float], stop: Any = lambda: False,
        hp: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[dict[str, str]]]:
    adapter = Adapter(step_s=0.25, clock=fake_clock)
    out = converge.train(adapter, Data(schedule), {**HP, **(hp or {})}, "synthetic", 8, 0, tmp_path, stop, "frames/s")
    with (tmp_path / "convergence.csv").open() as fh:
        return out, list(csv.DictReader(fh))


def test_stops_at_the_first_evaluation_that_reaches_the_target(tmp_path, fake_clock) -> None:
    out, rows = run(tmp_path, [0.1, 0.5, 0.95, 0.99], fake_clock)
    # evaluations before training, then after each second of training (4 steps of 0.25 s)
    assert [float(r["quality"]) for r in rows] == [0.1, 0.5, 0.95]
    assert [int(r["step"]) for r in rows] == [0, 4, 8]
    assert [int(r["samples"]) for r in rows] == [0, 32, 64]
    assert rows[0]["loss"] == "" and float(rows[1]["loss"]) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4, abs=1e-6)
    c, m = out["convergence"], out["metrics"]
    assert c["reached"] and c["first_quality"] == 0.1 and c["best_quality"] == 0.95 and c["held_out_samples"] == 50
    assert m["time_to_target"]["value"] == 2.0 and m["time_to_target"]["steps"] == 8
    assert m["training_throughput"]["value"] == pytest.approx(2 * 64 / 2.0) and m["training_throughput"]["unit"] == "frames/s"
    assert out["data_source"] == "a stand-in task"


def test_the_cap_ends_a_run_that_does_not_reach_the_target(tmp_path, fake_clock) -> None:
    out, rows = run(tmp_path, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], fake_clock, hp={"max_train_s": 2.5})
    assert [int(r["step"]) for r in rows] == [0, 4, 8, 10]   # the last point is where training stopped
    c, ttt = out["convergence"], out["metrics"]["time_to_target"]
    assert not c["reached"] and c["final_quality"] == 0.4
    assert ttt["value"] is None and "not reached within max_train_s = 2.5 s" in ttt["reason"]


def test_an_interrupted_run_keeps_its_curve_and_says_so(tmp_path, fake_clock) -> None:
    calls = iter(range(100))
    out, rows = run(tmp_path, [0.1, 0.2, 0.3], fake_clock, stop=lambda: next(calls) >= 6)
    assert len(rows) == 3 and out["metrics"]["time_to_target"]["reason"] == "the run was interrupted"


def test_the_preset_exists_only_where_a_workload_defines_it_and_on_pytorch() -> None:
    specs.build(model="resnet50", framework="pytorch", batch_size=64, preset="converge", device="cpu")
    with pytest.raises(UserError, match="runs on pytorch with one worker"):
        specs.build(model="resnet50", framework="tensorflow", batch_size=64, preset="converge", device="cpu")
    with pytest.raises(UserError, match="has no 'converge' preset"):
        specs.build(model="bert", framework="pytorch", batch_size=8, preset="converge", device="cpu")


class ScoredTask(Task):
    """A task scored by its own training (A3C's finished episodes): no held-out set."""

    def __init__(self, scores: list[float | None]) -> None:
        super().__init__(Data([]).convergence_task("synthetic", {}, 8, 0).train, [])
        self.scores = iter(scores)

    def score(self) -> float | None:
        return next(self.scores)


def test_a_task_that_scores_itself_may_have_no_score_yet(tmp_path, fake_clock) -> None:
    data = Data([])
    data.convergence_task = lambda *args: ScoredTask([None, None, -20.0, -14.0])  # type: ignore[method-assign]
    out = converge.train(Adapter(step_s=0.25, clock=fake_clock), data, HP | {"target": -15.0}, "synthetic", 8, 0,
                         tmp_path, lambda: False)
    with (tmp_path / "convergence.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["quality"] for r in rows] == ["", "", "-20.0", "-14.0"]
    c = out["convergence"]
    assert c["reached"] and c["first_quality"] == -20.0 and c["best_quality"] == -14.0
    assert out["metrics"]["time_to_target"]["value"] == 3.0 and "held-out" not in out["metrics"]["time_to_target"]["method"]
