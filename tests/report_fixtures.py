"""Run directories made by hand for the report's tests: exactly the files a run writes
(summary.json, env.json, spec.json, and memory.json / kernels.csv where given), then indexed.

They are for what a run on this project's CPU machines cannot give: GPU devices and their metrics (utilization,
FP32, kernels, memory on a GPU), multi-node jobs, chosen throughputs that make a paper's claim hold or fail.
A test about reading the files a run writes reads the corpus of real run folders (tests/corpus_runs.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from tbdkit.results.index import Index

CPU_REASON = "the run is on the CPU: there is no GPU to measure"


def make_run(results: Path, model: str, framework: str, batch: int, thr: float, *, device: str = "cpu",
             device_name: str = "Test CPU", metrics: dict[str, float | None] | None = None,
             memory: dict[str, int | None] | None = None, kernels: list[dict[str, Any]] | None = None,
             world_size: int = 1, nodes: int = 1, link_rate: str | None = None, started: str = "2026-11-22T10:00:00",
             precision: str = "fp32", preset: str = "smoke", variant: str | None = None, data: str = "synthetic",
             peak_flops: float | None = None, ci95_relative: float = 0.01) -> Path:
    """One run folder. `peak_flops` is recorded as the agent records it, beside the MFU metric."""
    run_id = (f"{started.replace(':', '')}-{model}-{framework}-b{batch}-{device_name.replace(' ', '')}-{world_size}-{link_rate}"
              f"-{nodes}n-{precision}-{preset}-{variant}-{data.strip('/').replace('/', '_')}")
    run = results / run_id
    run.mkdir(parents=True)
    m: dict[str, Any] = {"throughput": {"value": thr, "unit": "samples/s", "method": "fixture",
                                        "ci95_half_width": thr * ci95_relative, "ci95_relative": ci95_relative}}
    if peak_flops is not None:
        m["mfu"] = {"value": 40.0, "unit": "%", "method": "fixture", "peak_flops": peak_flops, "peak_method": "fixture"}
    for name in ("gpu_utilization", "gpu_utilization_trace", "fp32_utilization", "tensor_utilization"):
        value = (metrics or {}).get(name)
        m[name] = {"value": value, "unit": "%", "method": "fixture", **({} if value is not None else {"reason": CPU_REASON})}
    m["cpu_utilization"] = {"value": 99.0, "unit": "%", "method": "fixture"}
    summary = {"run_id": run_id, "status": "ok", "model": model, "framework": framework, "batch_size": batch,
               "precision": precision, "preset": preset, "variant": variant, "data": data, "device": device, "started_utc": started, "metrics": m,
               "math_mode": "fp32 (TF32 off)", "world_size": world_size, "nodes": nodes, "link_rate": link_rate}
    env = {"kit": {"version": "0.1.0"}, "cpu": {"model": device_name, "logical_cores": 2},
           "gpu": {"available": device != "cpu", "name": device_name, "driver_version": "580.1" if device != "cpu" else None},
           "framework": {"framework": framework, "framework_version": "1.0", "device_name": device_name}}
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "env.json").write_text(json.dumps(env))
    (run / "spec.json").write_text(json.dumps({"model": model, "framework": framework, "batch_size": batch}))
    if memory is not None:
        cats = {c: {"bytes": memory.get(c), "method": "fixture", "reason": None if memory.get(c) is not None else "n/a"}
                for c in ("weights", "weight_gradients", "feature_maps", "workspace", "dynamic")}
        peak = sum(v for v in memory.values() if v)
        (run / "memory.json").write_text(json.dumps({"device": device, "unit": "bytes", "categories": cats,
                                                      "peak": {"bytes": peak, "method": "fixture", "reason": None},
                                                      "unattributed": {"bytes": 0, "method": "fixture", "reason": None}}))
    if kernels is not None:
        with (run / "kernels.csv").open("w", newline="") as fh:
            cols = ["kernel", "calls", "total_time_us", "time_share", "mean_time_us", "fp32_utilization",
                    "tensor_utilization", "method"]
            w = csv.DictWriter(fh, fieldnames=cols)
            w.writeheader()
            for k in kernels:
                w.writerow({c: k.get(c, "") for c in cols})
    Index(results).add(run)
    return run
