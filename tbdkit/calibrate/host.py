"""The CPU probes: CPU utilization, memory and the collectors' overhead, through the agent's own
collector (tbdkit.agent.collectors.cpu) and overhead blocks (tbdkit.agent.overhead).

Busy threads hash a 1 MiB buffer (hashlib releases the GIL above 2 KiB), so k threads really use
k cores. The truth for the process's CPU utilization is the threads' own CPU clocks
(time.thread_time, CLOCK_THREAD_CPUTIME_ID: the kernel's per-thread accounting, read by another path
than psutil's /proc/<pid>/stat); on an idle machine that is k / cores, and on a busy one the threads
get less, which is named (the foreign load) rather than counted against the collector.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from statistics import median
from typing import Any

import psutil

from tbdkit.agent.collectors.cpu import CpuCollector
from tbdkit.calibrate.verdict import TRUSTED, ProbeResult, Tolerance, judge, unsupported

CPU_TOLERANCE = Tolerance(relative=0.03, absolute=2.0)  # percentage points: window edges, the main thread
IDLE_TOLERANCE = Tolerance(absolute=1.0)
MEMORY_TOLERANCE = Tolerance(relative=0.05, absolute=4.0)  # MiB: the allocator's own pages, the interpreter
NOISY_WIDTH = 0.05  # an A/A CI wider than this says nothing about a 2% overhead
OVERHEAD_LIMIT = 0.02
STARVED = 0.9  # busy threads that got less than this share of their cores: the machine is busy


def _spin(stop: threading.Event, clocks: list[float]) -> None:
    buf = b"\x5a" * 2**20
    t0 = time.thread_time()
    while not stop.is_set():
        hashlib.sha256(buf).digest()
    clocks.append(time.thread_time() - t0)


@contextlib.contextmanager
def spinning(k: int) -> Iterator[list[float]]:
    """k threads hashing (k busy cores) for the with-block; yields their CPU clocks (s), filled at its end."""
    stop, clocks = threading.Event(), []  # type: ignore[var-annotated]
    workers = [threading.Thread(target=_spin, args=(stop, clocks), daemon=True) for _ in range(k)]
    for w in workers:
        w.start()
    try:
        yield clocks
    finally:
        stop.set()
        for w in workers:
            w.join()


@contextlib.contextmanager
def sleeping_process() -> Iterator[int]:
    """A child Python that has finished starting and sleeps: its CPU time over the block is 0 by
    construction. (This process is no such thing: a test runner's leftover threads, or a child it
    reaps mid-window, add CPU time the idle probe would wrongly blame on the collector.)"""
    code = "import time; print('ready', flush=True); time.sleep(3600)"
    child = subprocess.Popen([sys.executable, "-I", "-S", "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        child.stdout.readline()
        yield child.pid
    finally:
        child.kill()
        child.wait()


def cpu_probe(
    seconds: float = 2.0, threads: int | None = None, collector: Callable[[], CpuCollector] = CpuCollector
) -> list[ProbeResult]:
    cores = psutil.cpu_count(logical=True) or 1
    k = threads or max(1, cores // 2)
    with sleeping_process() as pid:
        idle = collector()
        idle.proc = psutil.Process(pid)
        idle.start()
        time.sleep(seconds / 2)
        quiet = idle.stop()
    background = quiet["cpu_utilization"]["value"]
    idle_proc = quiet["process_cpu_utilization"]["value"]

    busy = collector()
    busy.start()
    w0 = time.perf_counter()
    with spinning(k) as clocks:
        time.sleep(seconds)
    wall = time.perf_counter() - w0
    got = busy.stop()
    truth = 100.0 * sum(clocks) / (cores * wall)
    proc = got["process_cpu_utilization"]["value"]
    system = got["cpu_utilization"]["value"]
    share = sum(clocks) / (k * wall)  # of the cores the threads asked for, what they got
    foreign = max(0.0, system - proc)
    note = {
        "threads": k,
        "cores": cores,
        "nominal": 100.0 * k / cores,
        "threads_got_cores": round(share * k, 3),
        "foreign_load_pct": foreign,
        "background_load_pct": background,
    }
    verdict = judge(truth, proc, CPU_TOLERANCE, "%")
    if verdict == TRUSTED and share < STARVED:
        note["busy"] = (
            f"machine busy ({foreign:.0f}% foreign load): the threads got {share:.0%} of "
            f"{k} core(s), so k/cores = {100.0 * k / cores:.0f}% was not reached; the collector "
            "agrees with the threads' clocks"
        )
    sys_verdict = (
        TRUSTED
        if proc - CPU_TOLERANCE.absolute <= system <= 100.0 + CPU_TOLERANCE.absolute
        else judge(proc, system, CPU_TOLERANCE, "%")
    )
    return [
        ProbeResult(
            "cpu.process_utilization",
            f"{k} busy thread(s) for {seconds:g} s on {cores} cores",
            truth,
            proc,
            "%",
            CPU_TOLERANCE,
            verdict,
            ("process_cpu_utilization",),
            note,
        ),
        ProbeResult(
            "cpu.process_utilization",
            f"a sleeping process for {seconds / 2:g} s",
            0.0,
            idle_proc,
            "%",
            IDLE_TOLERANCE,
            judge(0.0, idle_proc, IDLE_TOLERANCE, "%"),
            ("process_cpu_utilization",),
            {"background_load_pct": background},
        ),
        ProbeResult(
            "cpu.system_utilization",
            "same busy window: all cores, includes the busy threads",
            proc,
            system,
            "%",
            CPU_TOLERANCE,
            sys_verdict,
            ("cpu_utilization",),
            {
                "rule": "process <= system <= 100 (within the tolerance)",
                "background_load_pct": background,
                "foreign_load_pct": foreign,
            },
        ),
    ]


def memory_probe(mib: int = 128, collector: Callable[[], CpuCollector] = CpuCollector) -> ProbeResult:
    base = collector()
    base.start()
    base.sample()
    before = base.stop()["peak_rss"]["value"]
    c = collector()
    c.start()
    block = b"\x01" * (mib * 2**20)  # written, so every page is resident
    c.sample()
    del block
    after = c.stop()["peak_rss"]["value"]
    rise = after - before
    return ProbeResult(
        "cpu.peak_rss",
        f"allocate and write {mib} MiB",
        float(mib),
        rise,
        "MiB",
        MEMORY_TOLERANCE,
        judge(float(mib), rise, MEMORY_TOLERANCE, "MiB"),
        ("peak_rss",),
        {"rss_before_mib": before, "peak_after_mib": after},
    )


# --- collector overhead: paired rounds of bare and instrumented blocks -------------------------


def median_ci(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The median and its distribution-free confidence interval: order statistics j..n+1-j, the
    largest j with P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2. Needs n >= 6 for 95%."""
    xs = sorted(values)
    n = len(xs)
    j, acc = 0, 0.0
    while True:
        p = math.comb(n, j) / 2**n
        if acc + p > (1 - confidence) / 2:
            break
        acc += p
        j += 1
    if j == 0:
        return median(xs), -math.inf, math.inf
    return median(xs), xs[j - 1], xs[n - j]


def rounds_needed(rounds: int, lo: float, hi: float, med: float, target: float = 0.01) -> int | None:
    """Rounds for a CI narrower than `target` x the median, the width shrinking as 1/sqrt(rounds)."""
    if not math.isfinite(lo) or not math.isfinite(hi) or med <= 0:
        return None
    width = (hi - lo) / med
    return max(rounds, math.ceil(round(rounds * (width / target) ** 2, 9)))


@dataclass
class _Batch:
    work: float = 1.0
    samples: int = 1


class _Spinner:
    """A CPU-bound 'model' for the overhead blocks: each step is fixed pure-Python work (holds the GIL,
    so the sampler thread's cost shows)."""

    cuda_index = None
    device_label = "cpu"

    def __init__(self, n: int = 20000) -> None:
        self.n = n

    def prepare(self, batch: Any) -> Any:
        return batch

    def step(self, batch: Any) -> None:
        sum(range(self.n))

    def loss_value(self, loss: Any) -> float:
        return 0.0

    def environment(self) -> dict[str, Any]:
        return {}


def _batches() -> Iterator[_Batch]:
    while True:
        yield _Batch()


def overhead_probe(rounds: int = 8, block: int = 200, slow_full: float = 1.0) -> list[ProbeResult]:
    """A/A: two bare blocks per round, whose true ratio is 1 (the method's calibration); then bare
    vs the agent's full measuring loop (tbdkit.agent.overhead.full_block: the sampler thread with every
    collector). `slow_full` > 1 biases the A/A's second arm's clock on purpose (tests)."""
    from tbdkit.agent import overhead
    from tbdkit.spec.run_spec import MeasurePolicy

    model, batches = _Spinner(), _batches()
    interval = MeasurePolicy().sample_interval_s

    def arm(full: bool, slow: float = 1.0) -> float:
        if full:
            with contextlib.redirect_stdout(io.StringIO()):  # the loop's progress events
                w, t = overhead.full_block(model, batches, block, interval)
        else:
            w, t = overhead.bare_block(model, batches, block)
        return w / (t * slow)

    arm(False), arm(True)  # warm both paths
    aa, ab = [], []
    for _ in range(rounds):
        a = arm(False)
        aa.append(arm(False, slow_full) / a)
        b = arm(False)
        ab.append(arm(True) / b)
    out = []
    for name, ratios, expected in (
        ("A/A: bare vs bare (true ratio 1)", aa, 1.0),
        ("bare vs every collector sampling", ab, None),
    ):
        med, lo, hi = median_ci(ratios)
        need = rounds_needed(rounds, lo, hi, med)
        details = {
            "ratio_per_round": ratios,
            "ci95": [lo, hi],
            "rounds": rounds,
            "rounds_for_ci_under_1pct": need,
            "iterations_per_block": block,
        }
        width = (hi - lo) / med if math.isfinite(hi - lo) else math.inf
        if expected is not None:
            verdict = (
                judge(expected, med, Tolerance(), "")
                if not lo <= expected <= hi
                else TRUSTED
                if width <= NOISY_WIDTH
                else unsupported(f"machine too noisy (CI width {width:.0%}; ~{need} rounds for 1%)")
            )
        else:
            verdict = (
                TRUSTED
                if lo >= 1 - OVERHEAD_LIMIT
                else f"off by {med - 1:+.1%} (collectors cost more than {OVERHEAD_LIMIT:.0%})"
                if hi < 1 - OVERHEAD_LIMIT
                else unsupported(f"machine too noisy (CI {lo:.3f}-{hi:.3f}; ~{need} rounds for 1%)")
            )
            details["rule"] = (
                f"the CI's lower end >= {1 - OVERHEAD_LIMIT}: the collectors cost under {OVERHEAD_LIMIT:.0%}"
            )
        out.append(
            ProbeResult(
                "agent.collector_overhead",
                name,
                expected if expected else 1.0,
                med,
                "ratio",
                Tolerance(absolute=0.02) if expected is None else Tolerance(),
                verdict,
                ("throughput",),
                details,
            )
        )
    return out
