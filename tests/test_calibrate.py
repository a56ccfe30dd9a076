"""tbdkit calibrate: each probe recovers its known answer, and turns `off` when its instrument is biased."""

from __future__ import annotations

import time

from tbdkit.calibrate import timing
from tbdkit.calibrate.verdict import Tolerance, judge


def test_judge_within_and_off():
    assert judge(100.0, 104.0, Tolerance(relative=0.05), "%") == "trusted"
    assert judge(100.0, 50.0, Tolerance(relative=0.05), "%").startswith("off by -50")


def test_timing_probe_recovers_known_warmup_rate_and_coverage():
    results = {r.instrument: r for r in timing.probe(repeats=12, seed=1)}
    assert results["timing.warmup_detector"].verdict == "trusted"
    assert results["timing.warmup_detector"].measured >= timing.SyntheticLoop().true_warmup_end
    assert results["timing.throughput_ci"].status == "trusted"
    assert results["timing.throughput"].status == "trusted"


def test_timing_probe_off_when_the_clock_runs_at_half_speed():
    r = timing.probe(repeats=4, clock=lambda: time.perf_counter() * 0.5)[-1]
    assert r.status == "off"


def test_timing_probe_off_when_warmup_ends_too_early():
    warm, ci, _ = timing.probe(repeats=12, detector=lambda costs, w, t, m: len(costs) >= 20)
    assert warm.status == "off" and ci.status == "off"
