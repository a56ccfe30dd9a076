"""calibration.json: the probes' verdicts with the identity of the machine they ran on (the lookup
that names it in every later run's env.json is tbdkit.env.machine.calibration)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tbdkit
from tbdkit.calibrate.verdict import ProbeResult
from tbdkit.env import machine as envinfo
from tbdkit.results import files as runfiles
from tbdkit.results import sink

FILE = envinfo.CALIBRATION_FILE
machine = envinfo.machine_identity


def for_run(run_dir: Path) -> dict[str, Any]:
    """env.json's calibration of a run in `run_dir`: its results folder's own calibration.json."""
    return envinfo.calibration(runfiles.results_folder_of(run_dir))


def write(
    results: Path, device: str, quick: bool, probes: list[ProbeResult], steadiness: dict[str, Any] | None = None
) -> Path:
    """calibration.json in `results`: the probes, each metric's verdict and the machine's steadiness beside them."""
    doc = {
        "kind": "tbdkit-calibration",
        "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "kit_version": tbdkit.__version__,
        "device": device,
        "quick": quick,
        "machine": machine(),
        "verdicts": instrument_verdicts([p.as_json() for p in probes]),
        "probes": [p.as_json() for p in probes],
        "steadiness": steadiness,  # tbdkit.calibrate.steadiness: no known answer, so no verdict
    }
    envinfo.CalibrationFile.model_validate(doc)  # what a run will read of it
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
