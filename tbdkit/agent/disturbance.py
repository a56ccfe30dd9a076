"""Whether a finished sample window was disturbed, from what the collectors measured in it.

A disturbed run keeps its numbers (status `disturbed`, not `failed`): they are what this machine
gave while something else competed for it; the report leaves them out of the paper's claims unless
asked (`tbdkit report --include-disturbed`) and draws them hollow.

The threshold for foreign CPU load (MeasurePolicy.foreign_cpu_limit) is a quarter of one core, averaged over the window. A quiet
Linux host's background work (the kernel's threads, sshd, journald, a monitoring agent) uses a few
hundredths of a core; one other busy process uses a whole one. A framework's thread pool meets at a
barrier after every parallel operator, so a quarter of a core taken from any of its threads delays
every step: the issue that started this measured PyTorch's two OpenMP threads slowed up to 25x by
one neighbour on two cores. 0.25 keeps a quiet host's background well below the limit and flags
any neighbour busy a quarter of the time or more. Any other compute process on the run's GPU, and
any thermal or power clock event seen in the window, disturbs the run.
"""

from __future__ import annotations

from typing import Any

from tbdkit.agent.collectors.gpu_state import DISTURBING, POWER, THERMAL

FOREIGN_CPU_LIMIT = 0.25  # core-equivalents of other processes' CPU time on the run's cores (MeasurePolicy's default)


def rule(limit: float = FOREIGN_CPU_LIMIT) -> str:
    return (
        f"disturbed when other processes used more than {limit:g} core-equivalents of the run's cores on "
        "average over the sample window (foreign_cpu), any other compute process was on its GPU "
        "(foreign_gpu_processes), or a thermal or power clock event was seen in the window (gpu_clock_events)"
    )


def _value(metrics: dict[str, Any], name: str) -> float | None:
    value = (metrics.get(name) or {}).get("value")
    return float(value) if isinstance(value, (int, float)) else None


def reasons(metrics: dict[str, Any], limit: float = FOREIGN_CPU_LIMIT) -> list[str]:
    """Why the window whose collector metrics are `metrics` was disturbed (rule(limit)); empty if it was not."""
    out = []
    cpu = _value(metrics, "foreign_cpu")
    if cpu is not None and cpu > limit:
        cores = metrics["foreign_cpu"].get("cores") or []
        out.append(
            f"foreign CPU load: other processes used {cpu:.2f} core-equivalents of the run's "
            f"{len(cores) or '?'} core(s) (limit {limit:g})"
        )
    procs = _value(metrics, "foreign_gpu_processes")
    if procs:
        listed = metrics["foreign_gpu_processes"].get("processes") or []
        named = ", ".join(
            f"pid {p.get('pid')}"
            + (f" ({p['name']})" if p.get("name") else "")
            + (f" {p['used_gpu_memory_mib']:.0f} MiB" if p.get("used_gpu_memory_mib") else "")
            for p in listed
        )
        out.append(
            f"foreign GPU processes: {int(procs)} other process(es) on the run's GPU" + (f": {named}" if named else "")
        )
    events = metrics.get("gpu_clock_events") or {}
    seen = set((events.get("reasons_seen") or {}).keys()) & DISTURBING
    if seen:
        kinds = "/".join(k for k, group in (("thermal", THERMAL), ("power", POWER)) if seen & group)
        share = _value(metrics, "gpu_clock_events")
        out.append(
            f"{kinds} throttling: clock-event reasons {', '.join(sorted(seen))} in {share:.0f}% of the window's reads"
            if share is not None
            else f"{kinds} throttling"
        )
    return out
