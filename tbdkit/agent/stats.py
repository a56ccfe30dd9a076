"""Statistics of the timing loop: warm-up detection and the throughput's confidence interval."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist, fmean


def t_quantile(p: float, dof: int) -> float:
    """Student-t quantile by the Cornish-Fisher expansion (within 0.1% for dof >= 10, 1% for dof >= 3)."""
    z = NormalDist().inv_cdf(p)
    if dof <= 0:
        return math.inf
    if dof == 1:
        return math.tan(math.pi * (p - 0.5))
    if dof == 2:
        return (2 * p - 1) * math.sqrt(2 / (4 * p * (1 - p)))
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / dof + g2 / dof**2 + g3 / dof**3


def warmup_done(costs: list[float], window: int, tolerance: float, min_iterations: int) -> bool:
    """True when the mean cost per unit of work of the last `window` iterations is within
    `tolerance` (relative) of the `window` before, and not still falling faster than that.

    Costs are seconds per unit of work, so batches of different sizes (utterance lengths)
    compare fairly.
    """
    if len(costs) < max(min_iterations, 2 * window):
        return False
    recent = fmean(costs[-window:])
    before = fmean(costs[-2 * window:-window])
    return abs(recent - before) / recent < tolerance


@dataclass(frozen=True)
class Estimate:
    throughput: float          # units of work per second (ratio estimator: sum work / sum time)
    half_width: float          # 95% confidence half-width, same unit
    iterations: int
    seconds: float
    work: float

    @property
    def relative(self) -> float:
        return self.half_width / self.throughput if self.throughput > 0 else math.inf


@dataclass
class RunningRatio:
    """Throughput R = sum(work)/sum(time), with running sums so each update and check is O(1).

    The 95% interval is the delta method's: Var(R) ~ s^2 / (n * mean(time)^2), s^2 the sample
    variance of work_i - R*time_i, the right interval when iterations differ in work
    (utterances of different lengths).
    """

    n: int = 0
    w: float = 0.0
    t: float = 0.0
    ww: float = 0.0
    tt: float = 0.0
    wt: float = 0.0

    def add(self, work: float, seconds: float) -> None:
        self.n += 1
        self.w += work
        self.t += seconds
        self.ww += work * work
        self.tt += seconds * seconds
        self.wt += work * seconds

    def estimate(self) -> Estimate:
        rate = self.w / self.t if self.t > 0 else 0.0
        if self.n < 2:
            return Estimate(rate, math.inf, self.n, self.t, self.w)
        ss = max(self.ww - 2 * rate * self.wt + rate * rate * self.tt, 0.0)
        half = t_quantile(0.975, self.n - 1) * math.sqrt(ss / (self.n - 1) / self.n) / (self.t / self.n)
        return Estimate(rate, half, self.n, self.t, self.w)


def ratio_estimate(works: list[float], times: list[float]) -> Estimate:
    running = RunningRatio()
    for w, t in zip(works, times):
        running.add(w, t)
    return running.estimate()
