"""The small edges: a seed out of range is refused by the spec, `show` names an ambiguous prefix's
matches, read commands never create a results folder, a short or noisy window is `unstable`, an
interrupted window says so, and run ids retry a taken name with a fresh 32-bit suffix."""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import re
import time
import types
from dataclasses import dataclass

import pytest

import tbdkit.launch.outcome as outcome
from tbdkit.spec import run_spec as specs
from tbdkit.agent.loop import StopRequested, TrainingLoop
from tbdkit.agent.run import STABILITY_RULE, instability
from tbdkit.core.errors import UserError
from tbdkit.spec.run_spec import MeasurePolicy

from report_fixtures import make_run
from model_checks import cli

tbdkit = functools.partial(cli, env={"COLUMNS": "250"})  # in this process; wide: one sentence stays on one line


@pytest.mark.parametrize("seed", [-1, 2**31, 2**64])
def test_a_seed_out_of_range_is_one_sentence_naming_it(seed):
    with pytest.raises(UserError, match=rf"seed: must be a whole number from 0 to 2147483647.*\(got {seed}\)"):
        specs.build(model="resnet50", batch_size=2, seed=seed)
    assert specs.build(model="resnet50", batch_size=2, seed=2**31 - 1).seed == 2**31 - 1


def test_bench_refuses_a_negative_seed_before_running(tmp_path):
    proc = tbdkit("bench", "--model", "resnet50", "--framework", "pytorch", "--device", "cpu", "--seed", "-1",
                  "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and "seed: must be a whole number" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


def test_show_lists_the_runs_an_ambiguous_prefix_matches(tmp_path):
    results = tmp_path / "results"
    a = make_run(results, "resnet50", "pytorch", 2, 10.0)
    b = make_run(results, "resnet50", "pytorch", 4, 12.0)
    proc = tbdkit("show", "2026", "-r", str(results))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "'2026' is ambiguous" in proc.stderr and a.name in proc.stderr and b.name in proc.stderr
    assert "matches 2 runs" in proc.stderr
    proc = tbdkit("show", "nothing-like-it", "-r", str(results))
    assert proc.returncode == 2 and "No run matches 'nothing-like-it'" in proc.stderr
    assert tbdkit("show", a.name, "-r", str(results)).returncode == 0


@pytest.mark.parametrize("command", [["runs", "-r", "{p}"], ["show", "last", "-r", "{p}"], ["report", "{p}", "-o", "{o}"],
                                     ["bundle", "{p}", "-o", "{o}/b.tgz"]])
def test_read_commands_never_create_a_mistyped_results_folder(tmp_path, command):
    missing, out = tmp_path / "resluts", tmp_path / "out"
    proc = tbdkit(*(c.format(p=missing, o=out) for c in command))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"No results folder at {missing}: pass the folder that holds your runs" in proc.stderr
    assert not missing.exists() and not out.exists()
    (tmp_path / "file").write_text("x")
    proc = tbdkit(*(c.format(p=tmp_path / "file", o=out) for c in command))
    assert proc.returncode == 2 and "is a file, not a results folder" in proc.stderr


def test_the_stability_rule():
    assert instability(10, 0.01) is None and instability(5, 0.10) is None
    short = instability(3, 1.73)
    assert short is not None and "3 iteration(s), fewer than 5" in short and "173%, above 10%" in short
    assert "undefined" in (instability(1, float("inf")) or "")
    assert "above 10%" in (instability(50, 0.2) or "")
    assert "fewer than 5 iterations" in STABILITY_RULE and "10%" in STABILITY_RULE


@dataclass
class Batch:
    samples: int = 2
    work: float = 2.0


class Adapter:
    """A training step that sleeps; `fail` raises on the given window step (a signal or an error)."""

    cuda_index = None

    def __init__(self, fail_at: int | None = None, error: BaseException | None = None) -> None:
        self.steps, self.fail_at, self.error = 0, fail_at, error

    def prepare(self, batch):
        return batch

    def step(self, inputs):
        self.steps += 1
        if self.fail_at is not None and self.steps == self.fail_at:
            raise self.error  # type: ignore[misc]
        time.sleep(0.001)
        return 1.0

    def loss_value(self, loss):
        return float(loss)


POLICY = MeasurePolicy(min_warmup_iterations=1, warmup_window=2, max_warmup_iterations=2,
                       min_measure_iterations=4, max_measure_iterations=6, target_ci=1e-9)


@pytest.mark.parametrize("error, reason", [(KeyboardInterrupt(), "interrupted"), (MemoryError(), "error")])
def test_a_window_cut_short_names_why(error, reason):
    loop = TrainingLoop(Adapter(fail_at=4, error=error), itertools.repeat(Batch()), POLICY, lambda: False,
                        collectors=[])
    loop.warm_up()
    with pytest.raises(type(error)):
        loop.measure()
    assert loop.result.window["stop_reason"] == reason and loop.result.window["iterations"] == 1


def test_a_stop_request_and_the_cap_keep_their_reasons():
    stops = iter([False] * 4 + [True] * 10)
    loop = TrainingLoop(Adapter(), itertools.repeat(Batch()), POLICY, lambda: next(stops), collectors=[])
    loop.warm_up()
    with pytest.raises(StopRequested):
        loop.measure()
    assert loop.result.window["stop_reason"] == "interrupted"
    loop = TrainingLoop(Adapter(), itertools.repeat(Batch()), POLICY, lambda: False, collectors=[])
    loop.warm_up()
    loop.measure()
    assert loop.result.window["stop_reason"] == "iteration_cap" and loop.result.window["iterations"] == 6


def test_a_taken_run_id_is_retried_with_a_new_suffix(tmp_path, monkeypatch):
    spec = specs.build(model="resnet50", batch_size=2)
    first = outcome.new_run_dir(tmp_path, spec)
    assert re.fullmatch(r".*-[0-9a-f]{8}", first.name)  # 32 random bits
    suffixes = iter([first.name.rsplit("-", 1)[1], first.name.rsplit("-", 1)[1], "0123abcd"])
    monkeypatch.setattr(outcome, "secrets", types.SimpleNamespace(token_hex=lambda n: next(suffixes)))
    stamp = first.name.split("-resnet50")[0]
    moment = dt.datetime.strptime(stamp, "%Y%m%d-%H%M%S").replace(tzinfo=dt.timezone.utc)

    class Frozen:  # the same second as the first run
        @staticmethod
        def now(tz=None):
            return moment

    monkeypatch.setattr(outcome, "dt", types.SimpleNamespace(datetime=Frozen, timezone=dt.timezone))
    second = outcome.new_run_dir(tmp_path, spec)
    assert second != first and second.name.endswith("-0123abcd") and second.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, second.name])
