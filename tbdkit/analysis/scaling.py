"""Scaling efficiency of a data-parallel run against the single-worker run it grows from
(paper Sec. IV-E): aggregate throughput / (workers x single-worker throughput), the single run
being the latest one in the results index with the same model, framework, per-worker batch,
precision and device. Host side: it reads the index, so the agent does not have to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tbdkit.core.metric import metric
from tbdkit.results import summary as summaries
from tbdkit.results.index import Index
from tbdkit.results.rundir import RunDir
from tbdkit.results.summary import MEASURED


def add_scaling_efficiency(run_dir: Path, index: Index) -> dict[str, Any]:
    """Write `scaling_efficiency` into the run's summary.json (atomically) and return the summary."""
    rd = RunDir(run_dir)
    summary = rd.read_summary()  # checked: a damaged summary is not rewritten
    world = int(summary.get("world_size") or 1)
    if world <= 1 or summary.get("status") not in MEASURED:
        return summary
    aggregate = ((summary.get("metrics") or {}).get("aggregate_throughput") or {}).get("value")
    singles = [
        r
        for r in index.runs(model=summary["model"])
        if r["status"] in MEASURED
        and r["framework"] == summary["framework"]
        and r["batch_size"] == summary["batch_size"]
        and r["precision"] == summary["precision"]
        and r["device"] == summary.get("device")
        and (r.get("world_size") or 1) == 1
        and r.get("throughput")
    ]
    unit = "%"
    rule = (
        "aggregate throughput / (workers x throughput of the latest single-worker run of the same model, "
        "framework, per-worker batch, precision and device in this results folder)"
    )
    if aggregate is None or not singles:
        value = metric(
            None,
            unit,
            rule,
            reason="no single-worker run of the same model, framework, batch, precision "
            "and device in this results folder: run it with --gpus-per-node 1 first",
        )
    else:
        single = max(singles, key=lambda r: r["started_utc"] or "")
        value = metric(
            100.0 * aggregate / (world * single["throughput"]),
            unit,
            rule,
            baseline_run=single["run_id"],
            baseline_throughput=single["throughput"],
            baseline_status=single["status"],
        )
    return summaries.record(run_dir, summary, metrics={"scaling_efficiency": value})
