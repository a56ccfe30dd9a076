"""This machine's own steadiness: how much identical blocks of work vary in time from one to the next.

On a shared or virtual machine a training step's time varies with the machine as well as with the step: neighbours
on the same host take cache and memory bandwidth, and a virtual CPU's speed wanders, none of which shows as a process
on this machine. The warm-up rule sees that noise in every run's cost (summary.json's warmup.cost_noise) and needs
more iterations the noisier it is (tbdkit.core.statistics.warmup_iterations_needed), so a machine that is not quiet
ends warm-ups on their cap. This probe measures the machine apart from any model: a child process (its BLAS held to
one thread) multiplies two 1024 x 1024 float32 matrices with NumPy in blocks of about BLOCK_S, a CPU training step's
length, for the probe's seconds. Its noise is the standard deviation of the log block time (cost_noise's statistic),
its wander the relative difference between the means of the later and the earlier half.

It has no known answer, so it carries no verdict: `tbdkit calibrate` prints it and records it beside the verdicts
(calibration.json's `steadiness`), and every later run's env.json quotes it with the calibration.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from statistics import fmean, median, stdev
from typing import Any

from tbdkit.core.statistics import warmup_iterations_needed
from tbdkit.results.readers import MAX_ITERATIONS, count, finite
from tbdkit.spec.run_spec import PRESET_POLICY, MeasurePolicy

BLOCK_S = 0.2  # about one CPU training step of the smoke preset
SIZE = 1024
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
METHOD = (
    f"identical blocks of {SIZE} x {SIZE} float32 matrix products (NumPy, one BLAS thread, a child process) of about "
    f"{BLOCK_S} s each, timed with time.perf_counter after two untimed blocks; noise = standard deviation of the log "
    "block time, wander = mean of the later half / mean of the earlier half - 1; iterations_needed: the warm-up rule's "
    "need at that noise under each preset's policy (tbdkit.core.statistics.warmup_iterations_needed; null: never)"
)

# The child: sizes a block to about BLOCK_S, then prints the times of identical blocks for the seconds asked.
CHILD = """
import json, sys, time
import numpy as np
seconds, block_s, size = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
a, b = (rng.random((size, size), dtype=np.float32) for _ in range(2))
def block(k):
    t = time.perf_counter()
    for _ in range(k):
        a @ b
    return time.perf_counter() - t
k = max(1, round(block_s / (block(4) / 4)))
block(k)
block(k)
times, end = [], time.perf_counter() + seconds
while time.perf_counter() < end:
    times.append(block(k))
print(json.dumps({"products_per_block": k, "times": times}))
"""


def summarize(times: list[float]) -> dict[str, Any]:
    """The noise and wander of identical blocks' times, and the iterations each preset's warm-up rule needs at that
    noise (None where it never can judge it)."""
    if len(times) < 4 or min(times) <= 0:
        return {"noise": None, "reason": f"{len(times)} block(s) timed: too few to tell a noise (at least 4)"}
    logs = [math.log(t) for t in times]
    half = len(times) // 2
    noise = round(stdev(logs), 4)  # the need below is the rule's at the noise recorded
    needed = {}
    for preset in ("smoke", "paper"):
        p = MeasurePolicy(**PRESET_POLICY[preset])
        needed[preset] = warmup_iterations_needed(
            noise, p.warmup_window, p.warmup_tolerance, p.min_warmup_iterations, projection=p.warmup_drift_projection
        )
    return {
        "noise": noise,
        "wander": round(fmean(times[half:]) / fmean(times[:half]) - 1, 4),
        "blocks": len(times),
        "block_s": round(median(times), 4),
        "iterations_needed": needed,
        "method": METHOD,
    }


def measure(seconds: float) -> dict[str, Any]:
    """This machine's steadiness over `seconds` (summarize's fields), or a null noise with the reason."""
    env = {**os.environ, **dict.fromkeys(THREAD_ENV, "1")}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(seconds), str(BLOCK_S), str(SIZE)],
            capture_output=True,
            text=True,
            env=env,
            timeout=seconds + 120,
        )
        timed = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return {"noise": None, "reason": f"the probe's child failed: {type(exc).__name__}: {exc}"[:300]}
    if not isinstance(timed, dict):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"noise": None, "reason": f"the probe's child failed (exit {proc.returncode}): {tail}"[:300]}
    times = [float(t) for t in timed.get("times") or []]
    return {**summarize(times), "seconds": seconds, "products_per_block": timed.get("products_per_block")}


def sentence(steadiness: dict[str, Any]) -> str:
    """One line for a person: how steady this machine was, and what that noise asks of a warm-up."""
    noise = finite(steadiness.get("noise"))
    if noise is None:
        return f"steadiness: not measured ({str(steadiness.get('reason') or 'no reason recorded')[:300]})"
    needed = steadiness.get("iterations_needed")
    need = ", ".join(
        f"{'never' if n is None else count(n, MAX_ITERATIONS) or '?'} ({preset})"  # '?': a damaged or forged count
        for preset, n in (needed.items() if isinstance(needed, dict) else ())
        if preset in PRESET_POLICY
    )
    wander = finite(steadiness.get("wander"))
    return (
        f"steadiness: identical {finite(steadiness.get('block_s')) or BLOCK_S:.2g} s blocks of matrix products (one "
        f"thread) varied {noise:.1%} block to block{f' (later half {wander:+.1%})' if wander is not None else ''}; "
        + (
            f"a step that noisy needs warm-up iterations before the rule can judge it stable: about {need}"
            if need
            else "the warm-up rule's need at that noise was not recorded"
        )
    )
