"""The compile phase of a `--graph compiled` run: iterations before warm-up that give the compiler
every graph the run needs, so that compilation is measured apart and never falls in warm-up's
stability test or the sample window.

Rule (COMPILE_RULE): iterate (phase 'compile' in iterations.csv) over every distinct batch of the
synthetic pool once (each input shape the run trains on), at least MIN_ITERATIONS (an optimizer's
state appears at its first step, and a compiled step then compiles again), and then until an
iteration compiles nothing new by the framework's own count (adapter.compilations(); a framework
that does not count them stops after the pool), at most MAX_ITERATIONS. Warm-up starts afresh after
it, its stability judged on compiled iterations only.

compile_s = the phase's wall time less the time its work takes at the window's rate: the seconds
the compiler added, not the steps' own work. Each compiled run compiles from an empty cache of its own, so
compile_s is the cold cost; `--compile-cache shared` (PyTorch) keeps inductor's and Triton's caches across
runs for the warm cost; the run's spec.json and compile_s say which (CACHE).
"""

from __future__ import annotations

from typing import Any

from tbdkit.agent import events
from tbdkit.core.metric import metric, missing

MIN_ITERATIONS = 2
MAX_ITERATIONS = 64
COMPILE_RULE = (
    f"iterations before warm-up (phase 'compile'): one over each distinct batch of the synthetic pool, at least "
    f"{MIN_ITERATIONS}, then until one compiles nothing new by the framework's count, at most {MAX_ITERATIONS}"
)
COMPILE_METHOD = (
    "wall time of the compile phase's iterations less their work / the window's throughput "
    "(the time the compiler added, not the steps' own work); the phase's rule: " + COMPILE_RULE
)
CACHE = {
    "private": "private: the run compiles from an empty cache of its own, removed when it ends, so compile_s is the "
    "cold cost (`--compile-cache shared` measures the warm cost)",
    "shared": "shared (--compile-cache shared): PyTorch's inductor and Triton caches kept across runs, so compile_s "
    "is the warm cost where an earlier run compiled the same graphs (the cold cost on the first)",
}
STANDARD = (
    "standard graph: no compile phase (tf.function tracing, MXNet's hybridization and cuDNN autotuning, "
    "where a framework has them, happen in warm-up)"
)


def _agreed(loop: Any, flag: bool) -> bool:
    """`flag` agreed across a data-parallel job's workers (true on any: true on all), as the loop's decisions."""
    if loop.agree is None:
        return flag
    stop, done = loop.agree([loop.stop_requested(), flag])
    if stop:
        from tbdkit.agent.loop import StopRequested

        raise StopRequested()
    return bool(done)


def run(loop: Any, adapter: Any, distinct_batches: int | None) -> dict[str, Any]:
    """The compile phase over `loop` (a TrainingLoop); what it did, for summary.json's `compile_phase`."""
    events.emit("phase", phase="compile")
    first = len(loop.result.iterations)
    start = loop.clock()
    wanted = max(MIN_ITERATIONS, distinct_batches or 0)
    reason = "iteration_cap"
    for n in range(1, MAX_ITERATIONS + 1):
        before = adapter.compilations()
        loop.one_more("compile")
        after = adapter.compilations()
        quiet = before is None or after == before
        if _agreed(loop, n >= wanted and quiet):
            reason = "nothing new compiled" if before is not None else "every batch of the pool stepped once"
            break
    done = loop.result.iterations[first:]
    out = {
        "first_iteration": first,
        "last_iteration": len(loop.result.iterations) - 1,
        "iterations": len(done),
        "seconds": round(loop.clock() - start, 4),
        "work": sum(i.work for i in done),
        "end_reason": reason,
        "compilations": adapter.compilations(),
        "rule": COMPILE_RULE,
    }
    events.emit("compile_done", iterations=out["iterations"], seconds=out["seconds"], end_reason=reason)
    return out


def compile_seconds(phase: dict[str, Any] | None, throughput: float | None, unit: str) -> dict[str, Any]:
    """summary.json's compile_s: the phase's seconds less its work at the window's throughput."""
    if phase is None:
        return missing("s", COMPILE_METHOD, STANDARD)
    if not throughput:
        return missing("s", COMPILE_METHOD, "no sample window was measured, so the steps' own time is unknown")
    steady = phase["work"] / throughput
    return metric(
        max(0.0, phase["seconds"] - steady),
        "s",
        COMPILE_METHOD,
        phase_s=phase["seconds"],
        phase_iterations=phase["iterations"],
        steady_s=round(steady, 4),
        throughput_unit=unit,
        cache=phase.get("cache", CACHE["private"]),
    )
