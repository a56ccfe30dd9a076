"""The warm-up's time cap stretches where the rule needs longer than the cap at the step's pace, and only as far
as the rule could end the warm-up: a slow step (Deep Speech 2 on a slow CPU in the smoke preset, or at the paper's
batch on a GPU) ends warm-up as stable instead of always on the cap, while a noise the rule can never judge, or a
need the longest warm-up cannot hold, stops at the cap as before. A cap the user gives stays fixed.

The loop runs as the agent runs it, with the clock replaced: each step advances it by its recorded or drawn
seconds, so what the loop decides is exact."""

from __future__ import annotations

import csv
import itertools
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tbdkit.agent.loop import TrainingLoop
from tbdkit.core.errors import UserError
from tbdkit.core.statistics import STRETCH_ITERATIONS_MARGIN, stretched_warmup_cap
from tbdkit.spec import run_spec

FIXTURES = Path(__file__).parent / "fixtures" / "warmup"
sys.path.insert(0, str(FIXTURES))
import quiet  # noqa: E402  (tests/fixtures/warmup/quiet.py)

# `make bench MODEL=deepspeech2` on this 2-core VM with no other process on its cores (foreign CPU 0.017 cores),
# as it wrote it: run 20261130-063215-deepspeech2-pytorch-b4-fp32-0e130118, smoke, batch 4, fp32, PyTorch 2.14.1;
# 0.77 s a step and 16.7% noise per iteration (a one-thread matrix product varied 14-15% at the same time).
NOISY = FIXTURES / "noisy-deepspeech2-pytorch-iterations.csv"
# The same command an hour later, the machine idle: run 20261130-072823-deepspeech2-pytorch-b4-fp32-7a882687 (0.72 s
# a step, 7.0% noise over the later half of its warm-up, 5.7% in its window; foreign CPU 0.01 cores), before the
# stretch allowed for the need estimate's own error: its warm-up ended on the 45 s cap after 63 iterations.
SLOW = FIXTURES / "slow-deepspeech2-pytorch-iterations.csv"


@dataclass
class Step:
    samples: int
    work: float
    padded_work: float
    seconds: float


class Replay:
    """An adapter whose step advances the loop's clock by the batch's seconds."""

    cuda_index = None

    def __init__(self) -> None:
        self.now = 0.0

    def prepare(self, batch: Step) -> Step:
        return batch

    def step(self, batch: Step) -> None:
        self.now += batch.seconds

    def loss_value(self, loss: object) -> float:
        return 1.0


def warm_up(steps: list[Step], policy: run_spec.MeasurePolicy) -> dict:
    adapter = Replay()
    loop = TrainingLoop(adapter, itertools.cycle(steps), policy, lambda: False, collectors=[], clock=lambda: adapter.now)
    loop.warm_up()
    return loop.result.warmup


def policy(preset: str, **measure: float) -> run_spec.MeasurePolicy:
    return run_spec.build(model="deepspeech2", batch_size=4, preset=preset, measure=measure).measure


def fixed(p: run_spec.MeasurePolicy) -> run_spec.MeasurePolicy:
    return p.model_copy(update={"max_warmup_stretch": 1.0})


def test_the_cap_stretches_to_the_rules_need_where_that_fits_and_no_further():
    cap, longest = 45.0, 90.0
    # 59 iterations at 0.5 s in 45 s; the noise needs 60: room for 2 x 60 = 120 iterations, 61 more
    assert stretched_warmup_cap(cap, longest, 45.0, 0.5, 59, 60) == pytest.approx(45.0 + 61 * 0.5)
    assert math.ceil(60 * STRETCH_ITERATIONS_MARGIN) == 120
    # the margin's room is cut at the longest warm-up; the need itself fits
    assert stretched_warmup_cap(cap, longest, 45.0, 0.77, 59, 110) == longest
    # a need whose low end does not fit the longest warm-up (0.5 x 300 at 0.77 s: 115 s), a noise the rule never
    # judges, no noise
    assert stretched_warmup_cap(cap, longest, 45.0, 0.77, 59, 300) == cap
    assert stretched_warmup_cap(cap, longest, 45.0, 0.77, 59, 214) == longest  # 0.5 x 214 = 107 fits: 82 s
    assert stretched_warmup_cap(cap, longest, 45.0, 0.77, 59, None) == cap
    # a fixed cap
    assert stretched_warmup_cap(cap, cap, 45.0, 0.77, 59, 85) == cap
    # past the room it made: the cap is where the run is, so the loop stops
    assert stretched_warmup_cap(cap, longest, 83.0, 0.77, 120, 60) == 83.0


def test_a_slow_steps_quiet_series_ends_smoke_warm_up_stable_under_the_stretched_cap():
    """The quiet machine's settled series (tests/fixtures/warmup/quiet.py: 4.8% noise), at this VM's pace of 0.77 s
    a step: the smoke cap of 45 s holds 58 iterations, fewer than the rule's minimum of 60, so under a fixed cap
    every such warm-up ends capped; stretched, the rule ends it as stable, within twice the cap."""
    smoke = policy("smoke")
    assert smoke.max_warmup_s == 45.0 and smoke.longest_warmup_s == 90.0
    for seed in range(3):
        steps = [Step(4, 10.0 * 0.9, 10.0, 0.77 * c / 20.2) for c in quiet.series(seed)]
        stretched, capped = warm_up(steps, smoke), warm_up(steps, fixed(smoke))
        assert capped["end_reason"] == "time_cap" and capped["iterations"] < smoke.min_warmup_iterations, capped
        assert capped["cap_s"] == 45.0
        assert stretched["end_reason"] == "stable", stretched
        assert 45.0 < stretched["seconds"] <= 90.0 and stretched["cap_s"] > 45.0, stretched
        assert "stretches, up to 90 s" in stretched["rule"]


def recorded(path: Path) -> list[Step]:
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["phase"] in ("warmup", "measure")]
    return [Step(int(r["samples"]), float(r["work"]), float(r["work_padded"]), float(r["seconds"])) for r in rows]


def test_a_noise_the_rule_can_never_judge_stops_at_the_cap_as_recorded():
    """The recorded noisy run replayed: at its noise (16.7%) not even the rule's longest look-back bounds a drift,
    so the cap does not stretch and the warm-up ends where the recorded one did (59 iterations, 45 s)."""
    warmup = warm_up(recorded(NOISY), policy("smoke"))
    assert warmup["end_reason"] == "time_cap" and warmup["iterations"] == 59, warmup
    assert warmup["cap_s"] == 45.0 and warmup["iterations_needed"] is None and warmup["cost_noise"] > 0.15, warmup
    # a replay's loop has no collectors: its warm-up's foreign load is null with why, never a made-up 0
    foreign = warmup["foreign_cpu"]
    assert foreign["value"] is None and foreign["reason"] == "not measured: this loop watches no foreign load"


def test_a_recorded_slow_run_the_cap_ended_ends_stable_under_the_stretched_cap():
    """The recorded run of SLOW replayed: under its fixed 45 s cap it ended capped after 63 iterations, as it did
    (7.0% noise then: the rule's need, about 183, at 0.72 s); stretched, the rule judges it stable after 92."""
    smoke = policy("smoke")
    capped, stretched = warm_up(recorded(SLOW), fixed(smoke)), warm_up(recorded(SLOW), smoke)
    assert capped["end_reason"] == "time_cap" and capped["iterations"] == 63, capped
    assert 150 < capped["iterations_needed"] < 220, capped
    assert stretched["end_reason"] == "stable" and stretched["iterations"] == 92, stretched
    assert 45.0 < stretched["seconds"] < 90.0 == stretched["cap_s"], stretched


def test_the_paper_preset_warms_a_slow_gpu_step_up_to_stable():
    """Deep Speech 2 at the paper's batch on an H200 takes about 1.8 s a step: the paper preset's 120 s cap holds
    67 iterations, fewer than its minimum of 100, so a fixed cap ends every such warm-up capped; with 1.5% noise
    and a warm-up decay (a cache, an autotuner), the stretched cap lets the rule end it as stable after the decay."""
    paper = policy("paper")
    assert paper.max_warmup_s == 120.0 and paper.longest_warmup_s == 360.0 and paper.min_warmup_iterations == 100
    rng = random.Random(7)
    steps = [Step(32, 300.0, 320.0, 1.8 * (1 + 0.2 * math.exp(-t / 10)) * math.exp(rng.gauss(0, 0.015)))
             for t in range(400)]
    stretched, capped = warm_up(steps, paper), warm_up(steps, fixed(paper))
    assert capped["end_reason"] == "time_cap" and capped["iterations"] < 100, capped
    assert stretched["end_reason"] == "stable" and 120 < stretched["seconds"] < 360, stretched
    assert stretched["iterations"] >= paper.min_warmup_iterations


def test_a_cap_the_user_gives_is_fixed_and_a_recorded_spec_without_a_stretch_had_none():
    assert policy("smoke").max_warmup_stretch == 2.0 and policy("paper").max_warmup_stretch == 3.0
    assert policy("smoke", max_warmup_s=1.0).max_warmup_stretch == 1.0  # `--max-warmup-s 1`
    assert policy("paper", max_warmup_s=60.0, max_warmup_stretch=2.0).longest_warmup_s == 120.0
    assert run_spec.MeasurePolicy().max_warmup_stretch == 1.0  # spec.json written before the field
    assert policy("paper", max_warmup_s=3000.0, max_warmup_stretch=3.0).longest_warmup_s == run_spec.MAX_PHASE_S
    for bad in (0.5, 11.0):
        with pytest.raises(UserError, match="measure.max_warmup_stretch: must be a multiple of the warm-up cap"):
            policy("smoke", max_warmup_stretch=bad)


def test_what_plans_a_run_counts_its_longest_warm_up():
    """A bundle's plan (`tbdkit reproduce`), the results folder's room and ARTIFACT.md's table of runs count the
    warm-up as long as its cap may stretch."""
    from tbdkit.artifact import doc
    from tbdkit.artifact.plan import PlannedRun
    from tbdkit.results import space

    paper = run_spec.build(model="resnet50", batch_size=2, preset="paper")
    fixed_cap = run_spec.build(model="resnet50", batch_size=2, preset="paper", measure={"max_warmup_s": 120.0})
    assert PlannedRun("r", paper, None).caps_text == "warm-up <= 360 s, window <= 180 s"
    assert PlannedRun("r", fixed_cap, None).caps_s == 300.0
    assert space.run_folder_bytes(paper) > space.run_folder_bytes(fixed_cap)
    assert doc._warmup_cap(paper.measure.model_dump()) == "120 s (up to 360 s)"
    assert doc._warmup_cap(fixed_cap.measure.model_dump()) == "120 s"
