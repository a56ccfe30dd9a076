"""The collectors' cost: throughput of the full measuring loop (per-iteration records, the
sampler thread with every collector, progress events) divided by a bare loop's, in one process.

Each round measures a bare block and a full block back to back (bare first in odd rounds, full
first in even ones, so a steady drift in the machine's speed favours neither arm) over the same
cycle of synthetic batches; each block covers whole cycles of the batch pool so both see the same
work. The ratio is the geometric mean of the rounds' ratios, with its 95% interval over the paired
rounds (tbdkit.core.statistics.paired_ratio); rounds run until the interval's half-width is below
a target, or a cap on rounds or seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import fmean, stdev
from typing import Any

from tbdkit.adapters import load as load_adapter
from tbdkit.agent import events
from tbdkit.agent.loop import TrainingLoop, synthetic_pool
from tbdkit.core.statistics import PairedRatio, paired_ratio, rounds_for_half_width
from tbdkit.spec import catalog
from tbdkit.spec.run_spec import MAX_PHASE_S, MeasurePolicy

COST_TO_RESOLVE = 0.01  # the smallest cost the benchmark should tell from none: 1% of throughput


def bare_block(adapter, batches, iterations: int) -> tuple[float, float]:
    work = 0.0
    start = time.perf_counter()
    for _ in range(iterations):
        batch = next(batches)
        adapter.step(adapter.prepare(batch))
        work += batch.work
    return work, time.perf_counter() - start


def full_block(adapter, batches, iterations: int, interval_s: float) -> tuple[float, float]:
    policy = MeasurePolicy(
        min_measure_iterations=iterations,
        max_measure_iterations=iterations,
        target_ci=1e-9,
        max_measure_s=MAX_PHASE_S,  # the iteration count ends the block
        sample_interval_s=interval_s,
    )
    loop = TrainingLoop(adapter, batches, policy, stop_requested=lambda: False)
    est = loop.measure()
    return est.work, est.seconds


@dataclass
class Rounds:
    """The paired rounds of one overhead benchmark and why they stopped."""

    bare_rates: list[float] = field(default_factory=list)
    full_rates: list[float] = field(default_factory=list)
    stop_reason: str = "max_rounds"
    seconds: float = 0.0

    @property
    def ratios(self) -> list[float]:
        return [f / b for f, b in zip(self.full_rates, self.bare_rates)]

    def interval(self) -> PairedRatio:
        return paired_ratio(self.ratios)


def run_rounds(
    bare: Callable[[], float],
    full: Callable[[], float],
    target: float,
    min_rounds: int,
    max_rounds: int,
    max_s: float,
    on_round: Callable[[Rounds], None] = lambda rounds: None,
) -> Rounds:
    """Paired rounds of the two arms (each a callable returning one block's throughput), bare first
    in odd rounds and full first in even ones, until the ratio's 95% half-width is below `target`
    (after at least `min_rounds`), or `max_rounds`, or `max_s` seconds."""
    out = Rounds()
    start = time.perf_counter()
    while len(out.ratios) < max_rounds:
        if len(out.ratios) % 2 == 0:
            b = bare()
            f = full()
        else:
            f = full()
            b = bare()
        out.bare_rates.append(b)
        out.full_rates.append(f)
        out.seconds = time.perf_counter() - start
        on_round(out)
        if len(out.ratios) >= min_rounds and out.interval().half_width < target:
            out.stop_reason = "target"
            break
        if out.seconds >= max_s:
            out.stop_reason = "time_cap"
            break
    return out


def verdict(ci: PairedRatio, cost: float = COST_TO_RESOLVE) -> tuple[bool, str]:
    """(whether the noise hides a `cost` (1%) slowdown, a sentence saying what the interval tells):
    hidden when the interval holds both a ratio of 1 - cost and one above it, so that it can tell
    neither that the collectors cost less than `cost` nor that they cost more."""
    bound = 1 - cost
    if ci.rounds < 2:
        return True, f"one round gives no interval: the noise hides a {cost:.0%} cost"
    span = f"{ci.level:.0%} interval {ci.low:.4f}-{ci.high:.4f}"
    if ci.low >= bound:
        return False, f"the collectors cost less than {cost:.0%} of throughput ({span})"
    if ci.high < bound:
        return False, f"the collectors cost more than {cost:.0%} of throughput: {1 - ci.ratio:.1%} ({span})"
    return True, (
        f"the noise hides a {cost:.0%} cost: the {span} holds both a {cost:.0%} slowdown and "
        f"{'no cost' if ci.high >= 1 else 'a smaller one'}"
    )


def result_of(rounds: Rounds, target: float, min_rounds: int, max_rounds: int, max_s: float) -> dict[str, Any]:
    """The `overhead` event's fields that describe the rounds: the ratio, its interval and the verdict."""
    ci = rounds.interval()
    hidden, sentence = verdict(ci)
    ratios = rounds.ratios
    return {
        "rounds": ci.rounds,
        "bare_throughput": fmean(rounds.bare_rates),
        "collected_throughput": fmean(rounds.full_rates),
        "ratio": ci.ratio,
        "ratio_ci95": [ci.low, ci.high] if ci.rounds > 1 else None,
        "half_width": ci.half_width if ci.rounds > 1 else None,
        "ratio_per_round": ratios,
        "ratio_sd": stdev(ratios) if len(ratios) > 1 else None,
        "method": (
            "geometric mean of the rounds' ratios (full block / bare block, measured back to back, bare "
            "first in odd rounds and full first in even ones), Student's t interval on their logs "
            "(rounds - 1 degrees of freedom)"
        ),
        "stop_reason": rounds.stop_reason,
        "rule": (
            f"rounds until the 95% half-width is below {target:.1%} (at least {min_rounds}; caps "
            f"{max_rounds} rounds, {max_s:g} s)"
        ),
        "seconds": round(rounds.seconds, 3),
        "hides_one_percent": hidden,
        "verdict": sentence,
        "rounds_for_target": rounds_for_half_width(ci.rounds, ci.half_width, target),
        "target_half_width": target,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tbdkit.agent.overhead")
    p.add_argument("--model", default="deepspeech2")
    p.add_argument("--framework", default="pytorch")
    p.add_argument("--preset", default="smoke")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--device", default="auto")
    p.add_argument("--target-ci", type=float, default=0.005, help="stop once the ratio's 95%% half-width is below this")
    p.add_argument("--min-rounds", type=int, default=6)
    p.add_argument("--max-rounds", type=int, default=30)
    p.add_argument("--max-s", type=float, default=300.0, help="stop after the round that passes this many seconds")
    p.add_argument("--pool", type=int, default=8)
    p.add_argument("--cycles", type=int, default=2, help="pool cycles per block")
    p.add_argument("--sample-interval", type=float, default=MeasurePolicy().sample_interval_s)
    args = p.parse_args(argv)
    if not 2 <= args.min_rounds <= args.max_rounds:
        p.error("need 2 <= --min-rounds <= --max-rounds: an interval needs two rounds")
    model = catalog.get(args.model)
    hp = model.hp(args.preset)
    batch = args.batch or int(hp["default_batch"])
    data = catalog.load_module(model, "data")
    adapter = load_adapter(
        args.framework,
        workload=catalog.load_module(model, args.framework),
        hp=hp,
        device=args.device,
        precision="fp32",
        seed=0,
    )
    batches = synthetic_pool(data.batches("synthetic", hp, batch, 0), args.pool)
    block = args.pool * args.cycles
    bare_block(adapter, batches, block)  # warm-up of both paths, not counted
    full_block(adapter, batches, block, args.sample_interval)

    def bare() -> float:
        w, t = bare_block(adapter, batches, block)
        return w / t

    def full() -> float:
        w, t = full_block(adapter, batches, block, args.sample_interval)
        return w / t

    def report(rounds: Rounds) -> None:
        ci = rounds.interval()
        print(
            f"round {ci.rounds}: bare {rounds.bare_rates[-1]:.3f}, with collectors {rounds.full_rates[-1]:.3f} "
            f"{model.throughput_unit}, ratio {rounds.ratios[-1]:.4f}; so far {ci.ratio:.4f}"
            + (f" +- {ci.half_width:.2%}" if ci.rounds > 1 else ""),
            file=sys.stderr,
            flush=True,
        )

    rounds = run_rounds(bare, full, args.target_ci, args.min_rounds, args.max_rounds, args.max_s, report)
    result = {
        "model": args.model,
        "framework": args.framework,
        "preset": args.preset,
        "batch_size": batch,
        "device": adapter.device_label,
        "iterations_per_block": block,
        "unit": model.throughput_unit,
        **result_of(rounds, args.target_ci, args.min_rounds, args.max_rounds, args.max_s),
    }
    events.emit("overhead", **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
