"""Statistics of the timing loop: warm-up detection and the throughput's confidence interval."""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from statistics import NormalDist, fmean, median, stdev

EXACT_DOF = 30  # below this many degrees of freedom the quantile is exact; at or above, Cornish-Fisher (within 0.1%)


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, dof: int) -> float:
    """Student-t quantile (remembered: a window's interval asks for the same few quantiles at every iteration, and
    `tbdkit compare` for the same few at every level). Exact below EXACT_DOF degrees of freedom (the t
    distribution's closed-form CDF for an integer dof, inverted by bisection): the few runs a side that `tbdkit
    compare` meets have 2-6, where the Cornish-Fisher expansion was 0.7% (dof 3, 97.5%) to 3% (dof 3, 99.5%) too
    small. Above, Cornish-Fisher (within 0.1% for dof >= 10), O(1) for the timing loop's long windows."""
    if dof <= 0:
        return math.inf
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1 - p, dof)
    if dof < EXACT_DOF:
        return _t_quantile_exact(p, dof)
    z = NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / dof + g2 / dof**2 + g3 / dof**3


def _t_central(theta: float, dof: int) -> float:
    """P(|T| <= t) for t = sqrt(dof) tan(theta), T Student's t with an integer dof (Abramowitz & Stegun 26.7.3-4)."""
    s, c = math.sin(theta), math.cos(theta)
    term, total = 1.0, 1.0
    if dof % 2 == 0:
        for k in range(2, dof, 2):  # 1 + 1/2 c^2 + (1*3)/(2*4) c^4 + ... up to c^(dof-2)
            term *= (k - 1) / k * c * c
            total += term
        return s * total
    if dof == 1:
        return 2 * theta / math.pi
    for k in range(3, dof, 2):  # c + 2/3 c^3 + (2*4)/(3*5) c^5 + ... up to c^(dof-2)
        term *= (k - 1) / k * c * c
        total += term
    return 2 / math.pi * (theta + s * c * total)


def _t_quantile_exact(p: float, dof: int) -> float:
    target = 2 * p - 1
    low, high = 0.0, math.pi / 2
    for _ in range(100):  # bisection on theta: the central probability rises with it
        mid = (low + high) / 2
        low, high = (mid, high) if _t_central(mid, dof) < target else (low, mid)
    return math.sqrt(dof) * math.tan((low + high) / 2)


# The warm-up tests look back at most MAX_HORIZON iterations. Mann-Kendall and Sen's slope are
# O(horizon^2) per check, so they run every horizon / MK_CHECKS_PER_HORIZON iterations (every 10 at
# the cap: a few ms per iteration on average). A drift must stay below the tolerance when carried
# over DRIFT_PROJECTION x the iterations so far (a policy may ask for less: the smoke preset's short
# window). Chosen on the simulated series of tests/fixtures/warmup/simulate.py (docs/measurements.md, "Warm-up").
MAX_HORIZON = 400
MK_CHECKS_PER_HORIZON = 40
DRIFT_PROJECTION = 1.5


def warmup_horizon(n: int, window: int) -> int:
    """The trailing iterations the warm-up tests look at: the later half of all seen so far, at least
    2 x `window`, at most MAX_HORIZON, even (two equal blocks)."""
    h = min(max(2 * window, n // 2), MAX_HORIZON, n)
    return h - h % 2


def _means_match(older: list[float], newer: list[float], tolerance: float) -> bool:
    """The 95% interval of mean(newer) - mean(older) (Welch) lies within +-tolerance x mean(newer)."""
    k0, k1 = len(older), len(newer)
    m0, m1 = fmean(older), fmean(newer)
    v0 = sum((x - m0) ** 2 for x in older) / (k0 - 1) / k0
    v1 = sum((x - m1) ** 2 for x in newer) / (k1 - 1) / k1
    se = math.sqrt(v0 + v1)
    dof = round((v0 + v1) ** 2 / (v0**2 / (k0 - 1) + v1**2 / (k1 - 1))) if v0 + v1 > 0 else k0 + k1 - 2
    return abs(m1 - m0) + t_quantile(0.975, max(dof, 1)) * se < tolerance * m1


def _sen_drift_bounded(
    x: list[float], z: float, var_s: float, tolerance: float, seen: int, projection: float = DRIFT_PROJECTION
) -> bool:
    """Sen's slope's 95% interval (the median pairwise slope; its bounds from Mann-Kendall's
    variance, Sen 1968), carried over `projection` x the `seen` iterations so far (at most
    MAX_HORIZON of them), lies within +-tolerance x the median: even the steepest drift the data
    allow would move the cost by less than the tolerance over half as long again as the run so far
    (the default projection), never over less than the horizon itself (0.5: over the horizon, the
    later half of the run so far).
    Rank-based, so a rare slow iteration (a pause) does not hide or fake a drift."""
    h = len(x)
    slopes = sorted((x[j] - x[i]) / (j - i) for i in range(h - 1) for j in range(i + 1, h))
    c = z * math.sqrt(var_s)
    lo = slopes[max(0, int((len(slopes) - c) / 2))]
    hi = slopes[min(len(slopes) - 1, math.ceil((len(slopes) + c) / 2))]
    return max(abs(lo), abs(hi)) * max(h, projection * min(seen, MAX_HORIZON)) < tolerance * median(x)


def mann_kendall(x: list[float]) -> tuple[float, float]:
    """Mann-Kendall's trend statistic as a standard normal z (continuity-corrected), and Var(S)
    with ties accounted."""
    n = len(x)
    s = 0
    for i in range(n - 1):
        xi = x[i]
        for xj in x[i + 1 :]:
            s += (xj > xi) - (xj < xi)
    ties = Counter(x).values()
    var = (n * (n - 1) * (2 * n + 5) - sum(t * (t - 1) * (2 * t + 5) for t in ties)) / 18
    if var <= 0 or s == 0:
        return 0.0, max(var, 0.0)
    return ((s - 1) if s > 0 else (s + 1)) / math.sqrt(var), var


def warmup_done(
    costs: list[float],
    window: int,
    tolerance: float,
    min_iterations: int,
    alpha: float = 0.05,
    projection: float = DRIFT_PROJECTION,
) -> bool:
    """True when iteration cost has stopped drifting, by three tests over the trailing horizon
    (`warmup_horizon`: the later half of the iterations so far, at least 2 x `window`, at most
    MAX_HORIZON), after at least `min_iterations` and 2 x `window` iterations:

    1. the mean of its newer half matches the older half: the 95% interval of their difference
       lies within +-`tolerance` (relative);
    2. there is no trend: Mann-Kendall's two-sided test does not reject "no trend" at `alpha`;
    3. the drift is bounded: Sen's slope's 95% interval, carried over `projection` x the
       iterations so far (at most MAX_HORIZON of them), moves the cost by less than `tolerance`.
       The interval narrows only as horizon^-1.5 while the projection grows with the iterations,
       so the iterations this needs grow with the noise squared: about 770 at 4.8% noise with the
       default 1.5, about 110 with 0.5 (the projection the smoke preset asks for).
    2 and 3 cost O(horizon^2): they run every horizon/MK_CHECKS_PER_HORIZON iterations.

    A slow drift fails 2 or 3 long after two short blocks agree; noise makes the intervals wider,
    which delays the end rather than ending early. Costs are seconds per unit of work, so batches
    of different sizes (utterance lengths) compare fairly.
    """
    n = len(costs)
    if n < max(min_iterations, 2 * window, 4):
        return False
    h = warmup_horizon(n, window)
    x = costs[-h:]
    if not _means_match(x[: h // 2], x[h // 2 :], tolerance) or n % max(1, h // MK_CHECKS_PER_HORIZON):
        return False
    z_crit = NormalDist().inv_cdf(1 - alpha / 2)
    z, var_s = mann_kendall(x)
    return abs(z) < z_crit and _sen_drift_bounded(x, z_crit, var_s, tolerance, n, projection)


def cost_noise(costs: list[float]) -> float | None:
    """The iterations' relative noise as the warm-up tests see it: the standard deviation of log cost
    over the later half of the iterations so far (None below 4 iterations)."""
    tail = costs[len(costs) // 2 :]
    if len(tail) < 2 or min(tail) <= 0:
        return None
    return stdev([math.log(c) for c in tail])


def warmup_iterations_needed(
    noise: float,
    window: int,
    tolerance: float,
    min_iterations: int,
    alpha: float = 0.05,
    projection: float = DRIFT_PROJECTION,
) -> int | None:
    """About how many iterations `warmup_done` needs before it can judge a flat series with this
    relative `noise` (independent, per iteration) stable: Sen's drift bound is the test that needs most.
    Over a horizon of h = n/2 iterations a slope's 95% interval is about +-z noise sqrt(12 / h^3);
    carried over max(h, projection x n) it stays within the tolerance once
    n > 96 (z noise max(0.5, projection) / tolerance)^2. None when even the longest look-back
    (MAX_HORIZON, carried over max(1, projection) x it) cannot bound the drift at this noise: the rule
    would never judge such a series stable."""
    z = NormalDist().inv_cdf(1 - alpha / 2)
    if z * noise * max(1.0, projection) * math.sqrt(12 / MAX_HORIZON) >= tolerance:
        return None
    n = min(96 * (z * noise * max(0.5, projection) / tolerance) ** 2, 2 * MAX_HORIZON)
    return max(math.ceil(n), min_iterations, 2 * window)


# The iterations the rule needs are estimated from the noise so far (warmup_iterations_needed): on simulated flat
# series with 4-7% noise, the need estimated from the first 60 iterations, the rule ended between 0.4 and 2.8 times
# it, at 0.6-2.2 times in 8 of 10 (docs/measurements.md, "Warm-up"). A stretched warm-up cap leaves room for
# STRETCH_ITERATIONS_MARGIN x the need where NEED_LOW x it could fit.
STRETCH_ITERATIONS_MARGIN = 2.0
NEED_LOW = 0.5


def stretched_warmup_cap(
    cap_s: float, longest_s: float, elapsed: float, pace: float, seen: int, needed: int | None
) -> float:
    """The warm-up's time cap once `elapsed` has reached `cap_s`. A cap shorter than the iterations the rule needs
    ends every warm-up capped, whatever its cost does; so where `needed` iterations (`warmup_iterations_needed` of
    the noise so far, the rule's minimum included), at `pace` seconds an iteration from `seen` on, could fit within
    `longest_s` (NEED_LOW x `needed` does: the estimate has an error of its own), the cap grows to leave room for
    STRETCH_ITERATIONS_MARGIN x `needed` (at most `longest_s`). Else it stays `cap_s`: no noise yet, a noise the rule
    can never judge stable (`needed` None), or a need that cannot fit, since waiting would not let the rule end it."""
    if needed is None or longest_s <= cap_s or elapsed + max(0.0, NEED_LOW * needed - seen) * pace > longest_s:
        return cap_s
    target = math.ceil(needed * STRETCH_ITERATIONS_MARGIN)
    return min(longest_s, max(cap_s, elapsed + max(0, target - seen) * pace))


@dataclass(frozen=True)
class Estimate:
    throughput: float  # units of work per second (ratio estimator: sum work / sum time)
    half_width: float  # 95% confidence half-width, same unit
    iterations: int
    seconds: float
    work: float
    lag1: float = 0.0  # the residuals' lag-1 autocorrelation the interval was widened for (clamped to [0, LAG1_MAX])
    dof: int = 0  # the interval's degrees of freedom: the effective iterations - 1 (0: no interval)

    @property
    def se(self) -> float | None:
        """The throughput's standard error (None without an interval)."""
        return (
            self.half_width / t_quantile(0.975, self.dof) if self.dof >= 1 and math.isfinite(self.half_width) else None
        )

    @property
    def relative(self) -> float:
        return self.half_width / self.throughput if self.throughput > 0 else math.inf


# Successive iterations are not independent where a machine's speed wanders (a shared VM's: lag-1 autocorrelation
# 0.24-0.60 in the windows of Deep Speech 2 on this project's 2-core VM, docs/measured-here.md), and an interval that
# assumes they are is too narrow by sqrt((1 + rho) / (1 - rho)). The window's interval is widened for the residuals'
# lag-1 autocorrelation as an AR(1) process would need (docs/measurements.md, "The window's interval"); a negative
# one is taken as 0 (never narrower than independent iterations), and LAG1_MAX bounds it (at most x4.4 the width).
LAG1_MAX = 0.9


@dataclass
class RunningRatio:
    """Throughput R = sum(work)/sum(time), with running sums so each update and check is O(1).

    The 95% interval is the delta method's: Var(R) ~ s^2 / (n * mean(time)^2), s^2 the sample variance of the
    residuals r_i = work_i - R*time_i, the right interval when iterations differ in work (utterances of different
    lengths); widened for the residuals' lag-1 autocorrelation rho (sum r_i r_(i-1) / sum r_i^2: they sum to 0 by
    construction) as an AR(1) process needs: variance x (1 + rho) / (1 - rho), t's degrees of freedom from the
    effective iterations n (1 - rho) / (1 + rho).
    """

    n: int = 0
    w: float = 0.0
    t: float = 0.0
    ww: float = 0.0
    tt: float = 0.0
    wt: float = 0.0
    # lag-1 sums: work_i work_(i-1), work_i time_(i-1) + time_i work_(i-1), time_i time_(i-1)
    ww1: float = 0.0
    wt1: float = 0.0
    tt1: float = 0.0
    last: tuple[float, float] | None = None

    def add(self, work: float, seconds: float) -> None:
        self.n += 1
        self.w += work
        self.t += seconds
        self.ww += work * work
        self.tt += seconds * seconds
        self.wt += work * seconds
        if self.last is not None:
            w0, t0 = self.last
            self.ww1 += work * w0
            self.wt1 += work * t0 + seconds * w0
            self.tt1 += seconds * t0
        self.last = (work, seconds)

    def estimate(self) -> Estimate:
        rate = self.w / self.t if self.t > 0 else 0.0
        if self.n < 2:
            return Estimate(rate, math.inf, self.n, self.t, self.w)
        ss = max(self.ww - 2 * rate * self.wt + rate * rate * self.tt, 0.0)
        lagged = self.ww1 - rate * self.wt1 + rate * rate * self.tt1
        rho = min(max(lagged / ss, 0.0), LAG1_MAX) if ss > 0 and self.n >= 3 else 0.0
        dof = max(1, math.floor(self.n * (1 - rho) / (1 + rho)) - 1)
        var = ss / (self.n - 1) / self.n * (1 + rho) / (1 - rho)
        half = t_quantile(0.975, dof) * math.sqrt(var) / (self.t / self.n)
        return Estimate(rate, half, self.n, self.t, self.w, rho, dof)


def ratio_estimate(works: list[float], times: list[float]) -> Estimate:
    running = RunningRatio()
    for w, t in zip(works, times):
        running.add(w, t)
    return running.estimate()


@dataclass(frozen=True)
class PairedRatio:
    """The ratio of two arms measured in paired rounds: the geometric mean of the rounds' ratios and
    its confidence interval."""

    ratio: float
    low: float
    high: float
    rounds: int
    level: float

    @property
    def half_width(self) -> float:
        """Half the interval's width, relative to the ratio (inf below two rounds)."""
        return (self.high - self.low) / 2 / self.ratio if math.isfinite(self.high - self.low) else math.inf


def paired_ratio(ratios: list[float], level: float = 0.95) -> PairedRatio:
    """Each round measures both arms back to back, so its ratio is one paired comparison: the
    estimate is the geometric mean of the rounds' ratios, its interval Student's t on their logs
    with rounds - 1 degrees of freedom (Student's paired test on the log scale)."""
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    centre = fmean(logs)
    if n < 2:
        return PairedRatio(math.exp(centre), -math.inf, math.inf, n, level)
    sd = stdev(logs, centre)
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return PairedRatio(math.exp(centre), math.exp(centre - half), math.exp(centre + half), n, level)


def rounds_for_half_width(rounds: int, half_width: float, target: float) -> int | None:
    """Rounds for a relative half-width of `target`, from `rounds` that gave `half_width`: the
    interval narrows as 1/sqrt(rounds) (the t quantile's own shrinking is left out: an estimate)."""
    if not math.isfinite(half_width) or target <= 0:
        return None
    return max(rounds, math.ceil(round(rounds * (half_width / target) ** 2, 9)))
