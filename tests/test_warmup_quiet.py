"""The smoke preset's warm-up ends as stable on a settled series with a quiet CPU's noise (4.8% per
iteration, Deep Speech 2 on 2 cores) well within the iterations its 45 s cap holds, while a slow drift
at that that noise still waits."""

from __future__ import annotations

import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "warmup"))
import quiet  # noqa: E402  (tests/fixtures/warmup/quiet.py)

from tbdkit.core.statistics import warmup_done  # noqa: E402
from tbdkit.spec import run_spec  # noqa: E402


def first_stable(costs: list[float]) -> int | None:
    p = run_spec.build(model="deepspeech2", batch_size=4, preset="smoke").measure
    return next((n for n in range(1, len(costs) + 1)
                 if warmup_done(costs[:n], p.warmup_window, p.warmup_tolerance, p.min_warmup_iterations,
                                projection=p.warmup_drift_projection)), None)


def test_the_series_has_the_recorded_statistics():
    costs = quiet.series()
    fifths = [statistics.fmean(costs[k * 56:(k + 1) * 56]) for k in range(5)]
    assert all(abs(m - want) < 0.4 for m, want in zip(fifths, quiet.FIFTH_MEANS)), fifths
    noise = statistics.stdev(math.log(b / a) for a, b in zip(costs[60:], costs[61:])) / math.sqrt(2)
    assert abs(noise - quiet.NOISE) < 0.006, noise


def test_a_quiet_cpus_settled_series_ends_smoke_warm_up_well_within_its_cap():
    """Before, Sen's drift bound carried over 1.5x the iterations so far ended none of these within 280."""
    ends = [first_stable(quiet.series(seed)) for seed in range(3)]
    assert all(n is not None and n <= 180 for n in ends), ends


def test_a_warm_up_decay_with_that_noise_still_waits_in_smoke():
    """30% above, decaying with a time constant of 30 iterations (a compile cache, an autotuner), 4.8% noise:
    warm-up ends only once the cost is within 5%. (A decay ten times slower moves the cost by less than
    the noise over the smoke rule's horizon and is not seen: docs/measurements.md, "Warm-up".)"""
    for seed in range(2):
        rng = random.Random(seed)
        drift = [(1 + 0.3 * math.exp(-t / 30)) * math.exp(rng.gauss(0, quiet.NOISE)) for t in range(280)]
        n = first_stable(drift)
        assert n is None or 0.3 * math.exp(-n / 30) <= 0.05, n
