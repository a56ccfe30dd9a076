"""The loop's statistics: warm-up detection and the throughput interval."""

import math
import random
import statistics

import pytest

from tbdkit.agent.stats import RunningRatio, ratio_estimate, t_quantile, warmup_done


@pytest.mark.parametrize("dof, exact", [(3, 3.182446), (9, 2.262157), (30, 2.042272), (200, 1.971896)])
def test_t_quantile(dof, exact):
    tol = 0.01 if dof < 10 else 0.001
    assert abs(t_quantile(0.975, dof) - exact) / exact < tol


def test_warmup_waits_for_stable_cost():
    falling = [10.0 / (i + 1) for i in range(20)]          # still getting faster: not warm
    assert not warmup_done(falling, window=5, tolerance=0.05, min_iterations=3)
    settled = falling[:5] + [1.0, 1.01, 0.99, 1.0, 1.02, 1.0, 0.98, 1.01, 1.0, 0.99]
    assert warmup_done(settled, window=5, tolerance=0.05, min_iterations=3)
    assert not warmup_done(settled[:9], window=5, tolerance=0.05, min_iterations=3)  # too few yet
    assert not warmup_done([1.0] * 10, window=5, tolerance=0.05, min_iterations=12)


def test_ratio_estimator_matches_direct_formula():
    rng = random.Random(1)
    works = [rng.uniform(1, 3) for _ in range(300)]
    times = [w / 10 * rng.gauss(1, 0.05) for w in works]
    est = ratio_estimate(works, times)
    rate = sum(works) / sum(times)
    resid = [w - rate * t for w, t in zip(works, times)]
    half = t_quantile(0.975, 299) * statistics.stdev(resid) / math.sqrt(300) / statistics.fmean(times)
    assert est.throughput == pytest.approx(rate)
    assert est.half_width == pytest.approx(half, rel=1e-6)
    assert 0.002 < est.relative < 0.02


def test_interval_covers_the_true_rate_about_95_percent():
    rng = random.Random(2)
    hits = 0
    for _ in range(400):
        r = RunningRatio()
        for _ in range(30):
            w = rng.uniform(1, 3)
            r.add(w, w / 10 * rng.gauss(1, 0.1))
        e = r.estimate()
        hits += abs(e.throughput - 10.0) <= e.half_width + 0.05  # 1/E[1/x] bias is ~0.1%
    assert 0.9 <= hits / 400 <= 0.99


def test_running_ratio_needs_two_iterations():
    r = RunningRatio()
    r.add(1.0, 0.5)
    assert math.isinf(r.estimate().half_width)
