"""Timing and throughput estimation against a synthetic training loop whose truth is known.

Iteration i costs base x (1 + drift x max(0, 1 - i / warmup)) x u_i, u_i uniform on [1 - spread,
1 + spread] (mean 1): a warm-up drift that fades linearly over `warmup` iterations, then a stationary
loop of rate 1 / base iterations per second. The agent's own warm-up detector
(tbdkit.core.statistics.warmup_done, with the measuring policy's defaults) decides where warm-up ends,
then the agent's ratio estimator (RunningRatio) gives the throughput and its 95% CI.

- Coverage is measured over many repeats whose costs are drawn, not slept (hundreds take seconds),
  so it checks the statistics; one stationary loop sleeps the drawn costs, times each iteration with
  the agent's clock (time.perf_counter) and the estimator's rate must equal the iterations over the
  window's wall time read from another clock (time.monotonic_ns around the whole window): iteration
  times that lose or invent time are caught. Sleeping overshoots by the kernel's wake-up latency
  (0.1-1 ms on a loaded machine), which is real time: it is reported against the nominal rate, not judged.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median

from tbdkit.calibrate.verdict import TRUSTED, ProbeResult, Tolerance, judge
from tbdkit.core.statistics import RunningRatio, warmup_done
from tbdkit.spec.run_spec import MeasurePolicy

POLICY = MeasurePolicy()
THROUGHPUT_TOLERANCE = Tolerance(relative=0.01)  # per-iteration sums vs the window's clock
COVERAGE_TARGET = 0.95
# Detected warm-up ends later than the truth by at most this many iterations in the median repeat:
# the detector needs a horizon of 2 x window after the drift has faded, and checks the trend every
# horizon/40 iterations.
WARMUP_LATENESS = 6 * POLICY.warmup_window


@dataclass(frozen=True)
class SyntheticLoop:
    base_s: float = 0.005
    drift: float = 0.5
    warmup: int = 100
    spread: float = 0.05
    measure: int = 100

    @property
    def rate(self) -> float:
        return 1.0 / self.base_s

    @property
    def true_warmup_end(self) -> int:
        """The first iteration whose remaining drift is below the detector's tolerance."""
        return math.ceil(self.warmup * (1 - POLICY.warmup_tolerance / self.drift))

    def cost(self, i: int, rng: random.Random) -> float:
        return (
            self.base_s
            * (1 + self.drift * max(0.0, 1 - i / self.warmup))
            * rng.uniform(1 - self.spread, 1 + self.spread)
        )


Detector = Callable[[list[float], int, float, int], bool]


@dataclass(frozen=True)
class Repeat:
    warmup_end: int
    throughput: float
    half_width: float


def one_repeat(
    loop: SyntheticLoop,
    rng: random.Random,
    detector: Detector = warmup_done,
    run: Callable[[float], float] | None = None,
) -> Repeat:
    """One loop: warm-up until `detector` says stable (cap: the policy's), then `loop.measure`
    iterations into the ratio estimator. `run(cost)` returns the seconds the iteration took (None:
    the drawn cost itself)."""
    costs: list[float] = []
    i = 0
    while i < POLICY.max_warmup_iterations:
        c = loop.cost(i, rng)
        costs.append(run(c) if run else c)
        i += 1
        if detector(costs, POLICY.warmup_window, POLICY.warmup_tolerance, POLICY.min_warmup_iterations):
            break
    end = i
    ratio = RunningRatio()
    for j in range(loop.measure):
        c = loop.cost(end + j, rng)
        ratio.add(1.0, run(c) if run else c)
    est = ratio.estimate()
    return Repeat(end, est.throughput, est.half_width)


def sleeper(clock: Callable[[], float] = time.perf_counter) -> Callable[[float], float]:
    def run(seconds: float) -> float:
        t0 = clock()
        time.sleep(seconds)
        return clock() - t0

    return run


def wilson_upper(successes: int, n: int, z: float = 1.96) -> float:
    p = successes / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + margin) / (1 + z * z / n))


def probe(
    repeats: int = 200,
    seed: int = 0,
    loop: SyntheticLoop = SyntheticLoop(),
    detector: Detector = warmup_done,
    clock: Callable[[], float] = time.perf_counter,
) -> list[ProbeResult]:
    rng = random.Random(seed)
    sims = [one_repeat(loop, rng, detector) for _ in range(repeats)]
    covered = sum(abs(r.throughput - loop.rate) <= r.half_width for r in sims)
    coverage = covered / repeats
    upper = wilson_upper(covered, repeats)
    cov_verdict = TRUSTED if upper >= COVERAGE_TARGET else judge(COVERAGE_TARGET, coverage, Tolerance(), "")
    ends = [r.warmup_end for r in sims]
    early = sum(e < loop.true_warmup_end for e in ends) / repeats
    med_end = median(ends)
    if early > 1 - COVERAGE_TARGET:
        warm_verdict = (
            f"off by {med_end - loop.true_warmup_end:+g} iterations ({early:.0%} of repeats ended warm-up early)"
        )
    elif med_end - loop.true_warmup_end > WARMUP_LATENESS:
        warm_verdict = judge(loop.true_warmup_end, med_end, Tolerance(absolute=WARMUP_LATENESS), "iterations")
    else:
        warm_verdict = TRUSTED
    run = sleeper(clock)
    ratio = RunningRatio()
    w0 = time.monotonic_ns()
    for _ in range(2 * loop.measure):
        ratio.add(1.0, run(loop.base_s * rng.uniform(1 - loop.spread, 1 + loop.spread)))
    wall = (time.monotonic_ns() - w0) / 1e9
    real = ratio.estimate()
    window_rate = 2 * loop.measure / wall
    return [
        ProbeResult(
            "timing.warmup_detector",
            f"drift +{loop.drift:.0%} fading over {loop.warmup} iterations, {repeats} repeats",
            loop.true_warmup_end,
            med_end,
            "iterations",
            Tolerance(absolute=WARMUP_LATENESS),
            warm_verdict,
            ("warmup",),
            {
                "early_fraction": early,
                "min_end": min(ends),
                "max_end": max(ends),
                "rule": "ends at or after the truth in >= 95% of repeats, median at most "
                f"{WARMUP_LATENESS} iterations late",
            },
        ),
        ProbeResult(
            "timing.throughput_ci",
            f"95% CI over {loop.measure} iterations, {repeats} drawn repeats",
            COVERAGE_TARGET,
            coverage,
            "coverage",
            Tolerance(),
            cov_verdict,
            ("throughput",),
            {
                "covered": covered,
                "repeats": repeats,
                "wilson_upper_95": upper,
                "rule": "trusted when the 95% Wilson interval of the coverage reaches 0.95",
            },
        ),
        ProbeResult(
            "timing.throughput",
            f"{2 * loop.measure} slept iterations of {loop.base_s * 1e3:g} ms vs the window's own clock",
            window_rate,
            real.throughput,
            "it/s",
            THROUGHPUT_TOLERANCE,
            judge(window_rate, real.throughput, THROUGHPUT_TOLERANCE, "it/s"),
            ("throughput",),
            {
                "ci95_half_width": real.half_width,
                "nominal_rate": loop.rate,
                "sleep_overshoot_ms": (wall / (2 * loop.measure) - loop.base_s) * 1e3,
            },
        ),
    ]
