"""Scaling efficiency of a data-parallel run against the single-worker run it grows from
(paper Sec. IV-E): aggregate throughput / (workers x single-worker throughput), the single run
being the latest one in the results index with the same model, framework, per-worker batch,
precision and device. Host side, a plain function of the job's summary and the index's rows: the
launcher's finishing step (tbdkit.launch.conclude) records it as the run folder is written."""

from __future__ import annotations

from typing import Any

from tbdkit.core.metric import metric
from tbdkit.results.summary import MEASURED

RULE = (
    "aggregate throughput / (workers x throughput of the latest single-worker run of the same model, "
    "framework, per-worker batch, precision and device in this results folder)"
)


def scaling_efficiency(summary: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The job's `scaling_efficiency` metric against `runs` (rows of the results index), or None for a run
    of one worker or one that measured nothing."""
    world = int(summary.get("world_size") or 1)
    if world <= 1 or summary.get("status") not in MEASURED:
        return None
    aggregate = ((summary.get("metrics") or {}).get("aggregate_throughput") or {}).get("value")
    singles = [
        r
        for r in runs
        if r["status"] in MEASURED
        and r["model"] == summary["model"]
        and r["framework"] == summary["framework"]
        and r["batch_size"] == summary["batch_size"]
        and r["precision"] == summary["precision"]
        and r["device"] == summary.get("device")
        and (r.get("world_size") or 1) == 1
        and r.get("throughput")
    ]
    if aggregate is None or not singles:
        return metric(
            None,
            "%",
            RULE,
            reason="no single-worker run of the same model, framework, batch, precision "
            "and device in this results folder: run it with --gpus-per-node 1 first",
        )
    single = max(singles, key=lambda r: r["started_utc"] or "")
    return metric(
        100.0 * aggregate / (world * single["throughput"]),
        "%",
        RULE,
        baseline_run=single["run_id"],
        baseline_throughput=single["throughput"],
        baseline_status=single["status"],
    )
