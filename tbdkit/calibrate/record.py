"""calibration.json: the probes' verdicts with the identity of the machine they ran on, and the
lookup that names it in every later run's env.json."""

from __future__ import annotations

import json
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

import tbdkit
from tbdkit.agent import envinfo, sink
from tbdkit.calibrate.verdict import ProbeResult

FILE = "calibration.json"
SEARCH_UP = 3  # a run folder (or a worker's, one level deeper) finds its results folder's calibration


def machine() -> dict[str, Any]:
    """What makes two machines different instruments: host, CPU model and cores, GPUs by UUID, driver."""
    gpu = envinfo.gpus()
    return {
        "hostname": socket.gethostname(),
        "cpu_model": envinfo.cpu_model(),
        "logical_cores": psutil.cpu_count(logical=True),
        "gpu_uuids": sorted(str(d.get("uuid")) for d in gpu.get("devices", [])) if gpu.get("available") else [],
        "driver_version": gpu.get("driver_version"),
    }


def write(results: Path, device: str, quick: bool, probes: list[ProbeResult]) -> Path:
    doc = {
        "kind": "tbdkit-calibration",
        "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "kit_version": tbdkit.__version__,
        "device": device,
        "quick": quick,
        "machine": machine(),
        "verdicts": instrument_verdicts([p.as_json() for p in probes]),
        "probes": [p.as_json() for p in probes],
    }
    path = results / FILE
    sink.write_json(path, doc)  # temp file + rename: a reader never sees half a file
    return path


def instrument_verdicts(probes: list[dict[str, Any]]) -> dict[str, str]:
    """Each metric's verdict over all its probes: off if any is off, else unsupported if any is,
    else trusted."""
    rank = {"off": 2, "unsupported": 1, "trusted": 0}
    out: dict[str, str] = {}
    for p in probes:
        for m in p.get("metrics") or []:
            if rank.get(p["status"], 2) >= rank.get(out.get(m, "trusted"), 0):
                out[m] = p["status"]
    return out


def for_run(run_dir: Path) -> dict[str, Any]:
    """What env.json says of this machine's calibration: the file, its time and per-metric verdicts,
    when the nearest calibration.json above `run_dir` was made on this very machine."""
    here = machine()
    for folder in [run_dir, *run_dir.parents][:SEARCH_UP + 1]:
        path = folder / FILE
        if not path.is_file():
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            return {"calibrated": False, "path": str(path), "reason": f"unreadable: {exc}"}
        if doc.get("machine") != here:
            return {"calibrated": False, "path": str(path),
                    "reason": "calibration.json was made on another machine (identity differs); run tbdkit calibrate here"}
        return {"calibrated": True, "path": str(path.resolve()), "time_utc": doc.get("time_utc"),
                "device": doc.get("device"), "verdicts": doc.get("verdicts") or {}}
    return {"calibrated": False, "reason": "no calibration.json in the results folder; run tbdkit calibrate"}
