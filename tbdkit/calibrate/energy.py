"""The CPU energy probe: RAPL through Zeus (the agent's own reader, tbdkit.agent.collectors.energy),
over an idle window and a busy one (threads hashing, as the CPU probe's). The counter is trusted when
it moves forward over both and the busy window's mean power is above the idle one's (and below the
package's power limit where RAPL states one). Where RAPL or Zeus is missing the verdict is
`unsupported: why`, never a 0. The GPU side (NVML's energy counter) is tbdkit.calibrate.gpu's."""

from __future__ import annotations

import os
import time
from typing import Any

from tbdkit.calibrate.verdict import TRUSTED, ProbeResult, Tolerance, unsupported

INSTRUMENT = "rapl.cpu_energy"
PROBE = "idle then busy window: counter moves forward, idle < busy mean power <= package limit"
METRICS = ("cpu_energy", "cpu_power", "dram_energy", "dram_power")


def _unsupported(why: str, details: dict[str, Any] | None = None) -> ProbeResult:
    return ProbeResult(INSTRUMENT, PROBE, None, None, "W", Tolerance(), unsupported(why), METRICS, details or {})


def rapl_result(
    idle_j: float | None,
    idle_s: float,
    busy_j: float | None,
    busy_s: float,
    limit_w: float | None,
    details: dict[str, Any] | None = None,
) -> ProbeResult:
    """The verdict from the two windows' package energy (J) and lengths (s)."""
    details = dict(details or {})
    if idle_j is None or busy_j is None:
        return _unsupported("Zeus returned no RAPL package reading", details)
    idle_w, busy_w = idle_j / idle_s, busy_j / busy_s
    details.update(
        idle_j=round(idle_j, 6),
        busy_j=round(busy_j, 6),
        busy_s=round(busy_s, 6),
        idle_w=round(idle_w, 3),
        busy_w=round(busy_w, 3),
        package_limit_w=limit_w,
    )
    if idle_j < 0 or busy_j < 0:
        verdict = "off by a decrease: the RAPL counter went backwards"
    elif busy_j == 0:
        verdict = "off by 0 J: the RAPL counter did not move over a busy window (a stale or emulated counter)"
    elif busy_w <= idle_w:
        verdict = f"off by {busy_w - idle_w:+.1f} W (busy mean power not above the idle one's)"
    elif limit_w is not None and busy_w > limit_w * 1.05:
        verdict = f"off by {busy_w - limit_w:+.1f} W (mean power above the package's limit)"
    else:
        verdict = TRUSTED
    return ProbeResult(INSTRUMENT, PROBE, None, busy_w, "W", Tolerance(), verdict, METRICS, details)


def _limit_w(root: str) -> float | None:
    """The first package's long-term power limit (constraint_0_power_limit_uw), where readable."""
    try:
        with open(os.path.join(root, "intel-rapl:0", "constraint_0_power_limit_uw")) as fh:
            return int(fh.read().strip()) / 1e6
    except (OSError, ValueError):
        return None


def probe(seconds: float = 2.0) -> list[ProbeResult]:
    try:
        from zeus.device.cpu import rapl
        from zeus.monitor import ZeusMonitor

        from tbdkit.agent.collectors.energy import rapl_reason
    except ImportError:
        return [_unsupported("zeus is not installed in this environment (pip install zeus)")]
    why = rapl_reason()
    if why is not None:
        return [_unsupported(why)]
    from tbdkit.calibrate.host import spinning

    monitor = ZeusMonitor(gpu_indices=[], cpu_indices=None)
    monitor.begin_window("idle", sync_execution=False)
    time.sleep(seconds / 2)
    idle = monitor.end_window("idle", sync_execution=False)
    threads = os.cpu_count() or 1
    monitor.begin_window("busy", sync_execution=False)
    with spinning(threads):
        time.sleep(seconds)
    busy = monitor.end_window("busy", sync_execution=False)
    root = rapl.RAPL_DIR if os.path.isdir(rapl.RAPL_DIR) else rapl.CONTAINER_RAPL_DIR

    def total(m: Any) -> float | None:
        return float(sum(m.cpu_energy.values())) if m.cpu_energy else None

    return [
        rapl_result(
            total(idle),
            idle.time,
            total(busy),
            busy.time,
            _limit_w(root),
            {"packages": len(monitor.cpu_indices), "threads": threads},
        )
    ]
