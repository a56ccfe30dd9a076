"""The collectors' cost: throughput of the full measuring loop (per-iteration records, the
sampler thread with every collector, progress events) divided by a bare loop's, in one process.

Blocks of the two alternate (bare, full, bare, full, ...) over the same cycle of synthetic
batches, so drift in the machine's speed falls on both alike; each block covers whole cycles
of the batch pool so both see the same work.
"""

from __future__ import annotations

import argparse
import sys
import time
from statistics import fmean, stdev

from tbdkit.adapters import load as load_adapter
from tbdkit.agent import events
from tbdkit.agent.loop import TrainingLoop, synthetic_pool
from tbdkit.spec import catalog
from tbdkit.spec.run_spec import MAX_PHASE_S, MeasurePolicy


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tbdkit.agent.overhead")
    p.add_argument("--model", default="deepspeech2")
    p.add_argument("--framework", default="pytorch")
    p.add_argument("--preset", default="smoke")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--device", default="auto")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--pool", type=int, default=8)
    p.add_argument("--cycles", type=int, default=2, help="pool cycles per block")
    p.add_argument("--sample-interval", type=float, default=MeasurePolicy().sample_interval_s)
    args = p.parse_args(argv)
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
    ratios, bare_rates, full_rates = [], [], []
    for r in range(args.rounds):
        w0, t0 = bare_block(adapter, batches, block)
        w1, t1 = full_block(adapter, batches, block, args.sample_interval)
        bare_rates.append(w0 / t0)
        full_rates.append(w1 / t1)
        ratios.append((w1 / t1) / (w0 / t0))
        print(
            f"round {r + 1}/{args.rounds}: bare {w0 / t0:.3f}, with collectors {w1 / t1:.3f} "
            f"{model.throughput_unit}, ratio {ratios[-1]:.4f}",
            file=sys.stderr,
            flush=True,
        )
    result = {
        "model": args.model,
        "framework": args.framework,
        "preset": args.preset,
        "batch_size": batch,
        "device": adapter.device_label,
        "rounds": args.rounds,
        "iterations_per_block": block,
        "bare_throughput": fmean(bare_rates),
        "collected_throughput": fmean(full_rates),
        "unit": model.throughput_unit,
        "ratio": sum(full_rates) / len(full_rates) / fmean(bare_rates),
        "ratio_per_round": ratios,
        "ratio_sd": stdev(ratios) if len(ratios) > 1 else None,
    }
    events.emit("overhead", **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
