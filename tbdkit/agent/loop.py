"""The training loop of one run: warm-up until iteration cost is stable, then a sample window
until the throughput is known to the target precision or a cap is hit.

Iteration time is wall time from the end of one iteration to the end of the next, so the
window's iteration times add up to its wall time: data waits, host-to-device copies and the
step (the adapter waits for the device) all count, as in end-to-end training.
"""

from __future__ import annotations

import itertools
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from statistics import fmean, median
from typing import Any

import psutil

from tbdkit.adapters import Capabilities, capabilities
from tbdkit.agent import events
from tbdkit.agent.collectors import Collector, Sampler, default_collectors
from tbdkit.agent.collectors.neighbours import NeighbourCollector, method
from tbdkit.core.metric import metric, missing
from tbdkit.core.statistics import (
    MAX_HORIZON,
    NEED_LOW,
    STRETCH_ITERATIONS_MARGIN,
    Estimate,
    RunningRatio,
    cost_noise,
    stretched_warmup_cap,
    warmup_done,
    warmup_iterations_needed,
)
from tbdkit.spec.run_spec import MeasurePolicy

WARMUP = "the warm-up"  # the span of its foreign-load measurement, in the method's words

PACE_ITERATIONS = 20  # a stretched warm-up cap's pace: the median seconds of this many latest iterations


class StopRequested(Exception):
    """Raised between iterations once the user asked the run to stop (first Ctrl-C)."""


@dataclass
class Iteration:
    index: int
    phase: str
    start_s: float
    seconds: float
    data_wait_s: float
    samples: int
    work: float
    loss: float | None
    extra: dict[str, float] = field(default_factory=dict)  # secondary counts, e.g. {"tokens": n}
    padded: float | None = None  # Batch.padded_work: the work the step computes, padding included

    @property
    def cost(self) -> float:
        """Seconds per unit of the work the step computed (padding included where the batch says it): the
        quantity warm-up judges. A step's time follows its padded shape, so per unit of real work a batch of
        uneven utterances looks dearer than an even one, noise that would keep warm-up from ever agreeing."""
        return self.seconds / max(self.padded if self.padded is not None else self.work, 1e-12)

    def row(self) -> dict[str, Any]:
        start = round(self.start_s, 6)
        return {
            "iteration": self.index,
            "phase": self.phase,
            "start_s": start,
            # the rounded end less the rounded start: one row's start_s + seconds is the next row's start_s
            "seconds": round(round(self.start_s + self.seconds, 6) - start, 6),
            "data_wait_s": round(self.data_wait_s, 6),
            "samples": self.samples,
            "work": round(self.work, 6),
            **{f"work_{name}": round(value, 6) for name, value in self.extra.items()},
            **({"work_padded": round(self.padded, 6)} if self.padded is not None else {}),
            "loss": None if self.loss is None or math.isnan(self.loss) else round(self.loss, 6),
        }


def padded_work(batch: Any) -> float | None:
    """A batch's optional `padded_work` (its work as if every sample were as long as the longest), or None."""
    value = getattr(batch, "padded_work", None)
    return float(value) if value is not None else None


def extra_work(batch: Any) -> dict[str, float]:
    """A batch's optional secondary counts (`Batch.extra_work`, e.g. tokens beside sentences)."""
    counts = getattr(batch, "extra_work", None)
    return {str(k): float(v) for k, v in counts.items()} if counts else {}


class Prefetcher:
    """Reads batches of a real dataset on a background thread, a few batches ahead.

    The thread starts when the Prefetcher is made and calls `open_batches()` when the first batch is
    asked for: the agent makes it before a memory cap (a thread that cannot start under the cap would
    hang the run, see collectors.Sampler), while the reading, and the batches held, come under it."""

    def __init__(self, open_batches: Callable[[], Iterator[Any]], depth: int = 3) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self._go = threading.Event()
        self.thread = threading.Thread(target=self._fill, args=(open_batches,), name="tbdkit-data", daemon=True)
        self.thread.start()

    def _fill(self, open_batches: Callable[[], Iterator[Any]]) -> None:
        self._go.wait()
        try:
            for item in open_batches():
                self.queue.put(item)
        except BaseException as exc:  # handed to the consumer, which raises it
            self.error = exc
            self.queue.put(None)

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> Any:
        self._go.set()
        item = self.queue.get()
        if item is None and self.error is not None:
            raise self.error
        return item


@dataclass
class LoopResult:
    iterations: list[Iteration] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    warmup: dict[str, Any] = field(default_factory=dict)
    window: dict[str, Any] = field(default_factory=dict)


class TrainingLoop:
    def __init__(
        self,
        adapter: Any,
        batches: Iterator[Any],
        policy: MeasurePolicy,
        stop_requested: Callable[[], bool],
        collectors: list[Collector] | None = None,
        agree: Callable[[list[bool]], list[bool]] | None = None,
        caps: Capabilities | None = None,
        sampler: Sampler | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.adapter = adapter
        # every time the loop reads (iterations, warm-up's and the window's caps, progress): the real
        # time.perf_counter unless a test hands it a clock it controls
        self.clock = clock
        # the allocator's peak restarts with the window where the adapter can (caps: checked by the caller, else here)
        self._peaks = (caps if caps is not None else capabilities(adapter)).peak_reset
        # Workers of a data-parallel job must stop at the same iteration: each decision (stop
        # requested, warm-up stable, window done, a cap reached) is agreed across them after
        # every iteration (true on any worker -> true on all). None for a single worker.
        self.agree = agree
        self.batches = batches
        self.policy = policy
        self.stop_requested = stop_requested
        # The window's sampler (its collectors with it): made by the caller before a memory cap (see Sampler),
        # else here, where its thread starts before warm-up.
        if sampler is None:
            sampler = Sampler(
                collectors if collectors is not None else default_collectors(adapter), policy.sample_interval_s, clock
            )
        self.sampler = sampler
        self.result = LoopResult()
        self._t0 = self.clock()
        self._last_end = self._t0
        self._last_emit = 0.0

    @property
    def collectors(self) -> list[Collector]:
        """The window's collectors: its sampler's."""
        return self.sampler.collectors

    @property
    def t0(self) -> float:
        """The loop's clock when it started: iterations.csv's start_s counts from it (a Sampler handed in
        must read the same clock: samples.csv's origin is placed on it)."""
        return self._t0

    def _decide(self, *flags: bool) -> list[bool]:
        """The iteration's decisions, agreed across workers; raises StopRequested if any worker was asked to stop."""
        if self.agree is None:
            return list(flags)
        stop, *decided = self.agree([self.stop_requested(), *flags])
        if stop:
            raise StopRequested()
        return decided

    def _stop_point(self) -> None:
        """Raises StopRequested if the run was asked to stop (on any worker: agreed, as every decision is)."""
        if self.agree is None:
            if self.stop_requested():
                raise StopRequested()
        else:
            self._decide()

    def _one(self, phase: str) -> Iteration:
        if self.agree is None and self.stop_requested():
            raise StopRequested()
        t_fetch = self.clock()
        batch = next(self.batches)
        t_data = self.clock()
        loss = self.adapter.step(self.adapter.prepare(batch))
        end = self.clock()
        it = Iteration(
            index=len(self.result.iterations),
            phase=phase,
            start_s=self._last_end - self._t0,
            seconds=end - self._last_end,
            data_wait_s=t_data - t_fetch,
            samples=batch.samples,
            work=float(batch.work),
            loss=self.adapter.loss_value(loss) if loss is not None else None,
            extra=extra_work(batch),
            padded=padded_work(batch),
        )
        self._last_end = end
        self.result.iterations.append(it)
        return it

    def one_more(self, phase: str) -> Iteration:
        """One iteration outside warm-up and the window (e.g. phase 'analysis'), recorded as such."""
        return self._one(phase)

    def _progress(
        self, phase: str, it: Iteration, est: Estimate | None = None, elapsed: float = 0.0, cap_s: float | None = None
    ) -> None:
        now = self.clock()
        if now - self._last_emit < 0.25:
            return
        self._last_emit = now
        fields: dict[str, Any] = {
            "phase": phase,
            "iteration": it.index,
            "elapsed_s": round(elapsed, 3),
            "throughput": round(it.work / it.seconds, 4) if it.seconds > 0 else None,
        }
        if cap_s is not None:  # the phase's cap as it stands (a warm-up's may stretch)
            fields["cap_s"] = round(cap_s, 3)
        if est is not None:
            fields["throughput"] = round(est.throughput, 4)
            fields["ci_relative"] = None if math.isinf(est.relative) else round(est.relative, 5)
        events.emit("progress", **fields)

    def warm_up(self) -> None:
        p = self.policy
        events.emit("phase", phase="warmup", cap_s=p.max_warmup_s)
        start = self.clock()
        neighbours = self._warmup_neighbours()
        costs: list[float] = []
        cap_s = p.max_warmup_s
        reason = "iteration_cap"
        for _ in range(p.max_warmup_iterations):
            it = self._one("warmup")
            costs.append(it.cost)
            elapsed = self.clock() - start
            if elapsed >= cap_s:  # a cap, once stretched, holds: it only grows
                cap_s = max(cap_s, self._stretched_cap(costs, elapsed))
            self._progress("warmup", it, elapsed=elapsed, cap_s=cap_s)
            stable, capped = self._decide(
                warmup_done(
                    costs,
                    p.warmup_window,
                    p.warmup_tolerance,
                    p.min_warmup_iterations,
                    projection=p.warmup_drift_projection,
                ),
                elapsed >= cap_s,
            )
            if stable:
                reason = "stable"
                break
            if capped:
                reason = "time_cap"
                break
        noise = cost_noise(costs)
        needed = self._iterations_needed(noise)
        self.result.warmup = {
            "iterations": len(costs),
            "seconds": round(self.clock() - start, 4),
            "end_reason": reason,
            # the time cap it ran under: max_warmup_s, or stretched where the rule needed longer (stretched_warmup_cap)
            "cap_s": round(cap_s, 3),
            # What a capped warm-up lacked: the cost's noise per iteration over the later half, and about how
            # many iterations the rule needs to judge a flat series with that noise stable (None: never).
            "cost_noise": None if noise is None else round(noise, 4),
            "iterations_needed": needed,
            # other processes' CPU on the run's cores over the warm-up: a noisy cost with none is the machine's own
            "foreign_cpu": self._warmup_foreign(neighbours),
            "rule": (
                f"stable when the seconds per unit of work (padding included) stop drifting over the later half "
                f"of the iterations so far (at least {2 * p.warmup_window}, at most {MAX_HORIZON}): the halves' "
                f"means agree within {p.warmup_tolerance:.0%} (95% interval), Mann-Kendall finds no trend (5%) and "
                f"Sen's slope interval moves the cost by less than {p.warmup_tolerance:.0%} over "
                f"{p.warmup_drift_projection:g}x the iterations so far (at most {MAX_HORIZON} of them), and never "
                f"over less than the horizon "
                f"(min {p.min_warmup_iterations} iterations; caps {p.max_warmup_s} s, "
                f"{p.max_warmup_iterations} iterations{self._stretch_text()}); cost_noise is the relative spread of "
                f"the cost over the "
                f"later half (null below 4 iterations), iterations_needed about how many iterations that noise needs "
                f"before the drift bound can hold (96 x (1.96 x noise x max(0.5, projection) / tolerance)^2; null "
                f"without a noise, or where not even the longest look-back can bound the drift)"
            ),
        }
        events.emit("warmup_done", **self.result.warmup)

    def _warmup_neighbours(self) -> NeighbourCollector | str:
        """Other processes' CPU load over the warm-up, on the cores the window's neighbours collector watches: a
        collector of its own, read at the warm-up's ends only; or why it is not measured."""
        watched = next((c for c in self.collectors if isinstance(c, NeighbourCollector)), None)
        if watched is None:
            return "not measured: this loop watches no foreign load"
        neighbours = NeighbourCollector(watched.cores, WARMUP)
        try:
            neighbours.start()
        except psutil.Error as exc:
            return f"not measured: psutil failed at the warm-up's start: {exc}"
        return neighbours

    def _warmup_foreign(self, neighbours: NeighbourCollector | str) -> dict[str, Any]:
        """The warm-up's foreign CPU load (a metric in cores, with the window's limit beside it), or null with why."""
        if isinstance(neighbours, str):
            return missing("cores", method(WARMUP), neighbours)
        foreign = neighbours.stop()["foreign_cpu"]
        foreign.pop("peak_tick_cores", None)  # read at the warm-up's two ends only: no ticks
        return {**foreign, "limit": self.policy.foreign_cpu_limit}

    def _stretch_text(self) -> str:
        p = self.policy
        if p.longest_warmup_s <= p.max_warmup_s:
            return ", the time cap fixed"
        return (
            f"; the time cap stretches, up to {p.longest_warmup_s:g} s, to make room for {STRETCH_ITERATIONS_MARGIN:g}x "
            f"the iterations the rule needs at the noise so far where {NEED_LOW:g}x that need fits within "
            f"{p.longest_warmup_s:g} s at the pace of the last {PACE_ITERATIONS} iterations (their median)"
        )

    def _iterations_needed(self, noise: float | None) -> int | None:
        p = self.policy
        if noise is None:
            return None
        return warmup_iterations_needed(
            noise, p.warmup_window, p.warmup_tolerance, p.min_warmup_iterations, projection=p.warmup_drift_projection
        )

    def _stretched_cap(self, costs: list[float], elapsed: float) -> float:
        """The warm-up's time cap past max_warmup_s: stretched where the rule needs longer at this pace and noise."""
        p = self.policy
        if p.longest_warmup_s <= p.max_warmup_s:
            return p.max_warmup_s
        # the warm-up's latest iterations (costs holds one per warm-up iteration: the last len(costs) recorded)
        pace = median(it.seconds for it in self.result.iterations[-min(PACE_ITERATIONS, len(costs)) :])
        needed = self._iterations_needed(cost_noise(costs))
        return stretched_warmup_cap(p.max_warmup_s, p.longest_warmup_s, elapsed, pace, len(costs), needed)

    def measure(self) -> Estimate:
        # A stop that came during warm-up's last iteration (a Ctrl-C, the launcher killed) ends the run here,
        # before the window and its collectors start (they would look for a launcher that may be gone).
        self._stop_point()
        p = self.policy
        events.emit("phase", phase="measuring", cap_s=p.max_measure_s, target_ci=p.target_ci)
        first = len(self.result.iterations)
        running = RunningRatio()
        sampler = self.sampler
        if self._peaks is not None:
            self._peaks.reset_peaks()
        sampler.start()
        start = self.clock()
        reason = "iteration_cap"
        try:
            while running.n < p.max_measure_iterations:
                it = self._one("measure")
                running.add(it.work, it.seconds)
                est = running.estimate()
                elapsed = self.clock() - start
                self._progress("measuring", it, est, elapsed)
                converged, capped = self._decide(
                    running.n >= p.min_measure_iterations and est.relative < p.target_ci, elapsed >= p.max_measure_s
                )
                if converged:
                    reason = "converged"
                    break
                if capped:
                    reason = "time_cap"
                    break
        except (StopRequested, KeyboardInterrupt):  # a first Ctrl-C/SIGTERM, or a second one mid-step
            reason = "interrupted"
            raise
        except BaseException:  # the step failed (out of memory, bad data): the caps were not what ended it
            reason = "error"
            raise
        finally:
            self.result.metrics.update(sampler.stop())
            self.result.samples = sampler.rows
            window = self.result.iterations[first:]
            self.result.window = {
                "first_iteration": first,
                "last_iteration": len(self.result.iterations) - 1,
                "iterations": len(window),
                "seconds": round(sum(i.seconds for i in window), 6),
                "stop_reason": reason,
                "samples_origin_s": round(sampler.t0 - self._t0, 6),  # samples.csv's t_s = 0 on start_s's clock
                "rule": (
                    f"until the 95% confidence half-width of throughput is below {p.target_ci:.1%} "
                    f"(min {p.min_measure_iterations} iterations; caps {p.max_measure_s} s, "
                    f"{p.max_measure_iterations} iterations)"
                ),
            }
        return running.estimate()


def synthetic_pool(batches: Iterator[Any], size: int) -> Iterator[Any]:
    """Synthetic batches are made before timing starts and cycled, so generating them costs nothing."""
    return itertools.cycle(list(itertools.islice(batches, size)))


def extra_throughput_metrics(window: list[Iteration], units: Mapping[str, str]) -> dict[str, Any]:
    """`<name>_throughput` for every secondary count the window's batches carry (Batch.extra_work)."""
    total = sum(i.seconds for i in window)
    names = list(dict.fromkeys(name for i in window for name in i.extra))
    return {
        f"{name}_throughput": metric(
            sum(i.extra.get(name, 0.0) for i in window) / total,
            units.get(name, f"{name}/s"),
            f"{name} in the window's batches (Batch.extra_work) / window wall time "
            f"(iterations {window[0].index}-{window[-1].index})",
        )
        for name in names
    }


def throughput_metrics(
    window: list[Iteration], est: Estimate, unit: str, sample_unit: str, extra_units: Mapping[str, str] | None = None
) -> dict[str, Any]:
    seconds = [i.seconds for i in window]
    samples = sum(i.samples for i in window)
    total = sum(seconds)
    method = (
        f"sum of work / sum of iteration wall times over the sample window "
        f"(iterations {window[0].index}-{window[-1].index}); ratio estimator, 95% CI by the delta method, widened "
        "for the residuals' lag-1 autocorrelation as an AR(1) process needs (variance x (1 + rho) / (1 - rho), t's "
        "dof from n (1 - rho) / (1 + rho); tbdkit.core.statistics.RunningRatio)"
    )
    return {
        "throughput": metric(
            est.throughput,
            unit,
            method,
            ci95_half_width=None if math.isinf(est.half_width) else round(est.half_width, 6),
            ci95_relative=None if math.isinf(est.relative) else round(est.relative, 6),
            ci95_dof=est.dof if est.dof >= 1 else None,
            lag1_autocorrelation=round(est.lag1, 4),
        ),
        "sample_throughput": metric(samples / total, sample_unit, "samples in the window / window wall time"),
        "iteration_time": metric(
            fmean(seconds),
            "s",
            "mean iteration wall time in the window",
            median_s=round(median(seconds), 6),
            p90_s=round(sorted(seconds)[int(0.9 * (len(seconds) - 1))], 6),
            min_s=round(min(seconds), 6),
            max_s=round(max(seconds), 6),
        ),
        "data_wait": metric(
            100.0 * sum(i.data_wait_s for i in window) / total,
            "%",
            "share of window wall time spent waiting for the next batch",
        ),
        **extra_throughput_metrics(window, extra_units or {}),
    }
