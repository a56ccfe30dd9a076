"""Artifact bundles: a results folder as one tar.gz a reviewer can check and re-run.

Layout (every member under `tbdkit-artifact/`):
  manifest.json         format, kit version, creation time, the runs and sweeps, the report's
                        status, and the sha256 and size of every other member
  results/<run-id>/...  each run folder as it is on disk (spec.json, env.json, summary.json, CSVs, log)
  results/sweeps/...    the sweeps' state
  images.lock           the pinned framework images (docker/images.lock)
  report/...            the HTML report, when `tbdkit.report.build_report` is importable

Reading a bundle checks it before anything is extracted: only regular files and folders under
the prefix, no absolute or `..` paths, a manifest of this format, every file's hash.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import io
import json
import math
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from tbdkit import __version__
from tbdkit.errors import UserError
from tbdkit.paths import KIT_ROOT
from tbdkit.results import summary as summaries

PREFIX = "tbdkit-artifact"
FORMAT = "tbdkit-artifact/1"
MANIFEST = "manifest.json"
SKIP = {"index.sqlite"}  # rebuilt from the run folders (`tbdkit runs --rebuild`)
# Metrics compared by `reproduce`, when present with a number in both runs.
HEADLINE = ("throughput", "sample_throughput", "gpu_utilization", "fp32_utilization", "tensor_utilization",
            "cpu_utilization", "gpu_memory_used_peak", "framework_peak_allocated", "peak_rss")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_report_into(results: Path, out_dir: Path) -> dict[str, Any]:
    """The report, made by the report package when this kit has it: {included, path | reason}."""
    try:
        report = importlib.import_module("tbdkit.report")
        build = getattr(report, "build_report")
    except (ImportError, AttributeError):
        return {"included": False, "reason": "this kit has no report builder (tbdkit.report.build_report)"}
    try:
        html = Path(build(results, out_dir))
    except Exception as exc:  # a broken report must not lose the bundle of results
        return {"included": False, "reason": f"building the report failed: {type(exc).__name__}: {exc}"}
    return {"included": True, "path": f"report/{html.relative_to(out_dir).as_posix()}"}


def _run_dirs(results: Path) -> list[Path]:
    return sorted(d for d in results.iterdir() if d.is_dir() and (d / "spec.json").is_file())


def collect(results: Path) -> dict[str, bytes]:
    """Member name (below the prefix) -> bytes, for every file the bundle carries."""
    if not results.is_dir():
        raise UserError(f"No results folder at {results}: run `tbdkit bench` or `tbdkit sweep` first, or pass its path.")
    runs = _run_dirs(results)
    if not runs:
        raise UserError(f"{results} holds no runs (folders with a spec.json): nothing to bundle.")
    files: dict[str, bytes] = {}
    for folder in [*runs, results / "sweeps"]:
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
            if path.name in SKIP or path.name.endswith(".tmp"):
                continue
            files[f"results/{path.relative_to(results).as_posix()}"] = path.read_bytes()
    lock = KIT_ROOT / "docker" / "images.lock"
    if lock.is_file():
        files["images.lock"] = lock.read_bytes()
    return files


def bundle(results: Path, out: Path) -> dict[str, Any]:
    """Write the bundle atomically; returns its manifest."""
    files = collect(results)
    with tempfile.TemporaryDirectory(prefix="tbdkit-report-") as tmp:
        report = build_report_into(results, Path(tmp))
        if report["included"]:
            for path in sorted(p for p in Path(tmp).rglob("*") if p.is_file()):
                files[f"report/{path.relative_to(tmp).as_posix()}"] = path.read_bytes()
    runs = [name.split("/")[1] for name in files if name.startswith("results/") and name.endswith("/spec.json")
            and name.count("/") == 2]
    manifest = {
        "format": FORMAT, "kit_version": __version__,
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": sorted(runs),
        "sweeps": sorted({n.split("/")[2] for n in files if n.startswith("results/sweeps/")}),
        "report": report,
        "images_lock": "images.lock" if "images.lock" in files else None,
        "files": {name: {"sha256": sha256(data), "bytes": len(data)} for name, data in sorted(files.items())},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(f".{out.name}.tmp")
    with tarfile.open(tmp_out, "w:gz") as tar:
        for name, data in [(MANIFEST, json.dumps(manifest, indent=2).encode()), *sorted(files.items())]:
            info = tarfile.TarInfo(f"{PREFIX}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, int(dt.datetime.now().timestamp())
            tar.addfile(info, io.BytesIO(data))
    tmp_out.replace(out)
    return manifest


def _safe_name(name: str) -> str:
    """The member's path below the prefix, or a UserError if it could land outside it."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts or path.parts[0] != PREFIX or "\\" in name:
        raise UserError(f"The bundle holds an unsafe or foreign member path '{name}': refusing to read it "
                        f"(a tbdkit bundle holds only paths under {PREFIX}/; make one with `tbdkit bundle`).")
    return "/".join(path.parts[1:])


def read(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A bundle's manifest and files, every member checked against it; UserError if anything is off."""
    how = f"a tbdkit artifact made by `tbdkit bundle`"
    try:
        tar = tarfile.open(path, "r:gz")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise UserError(f"{path} is not a readable tar.gz ({exc}): pass {how}.") from None
    files: dict[str, bytes] = {}
    try:
        with tar:
            for member in tar.getmembers():
                name = _safe_name(member.name)
                if member.isdir():
                    continue
                if not member.isfile():
                    raise UserError(f"The bundle member '{member.name}' is a link or device, not a file: refusing "
                                    f"to read it; pass {how}.")
                extracted = tar.extractfile(member)
                assert extracted is not None
                files[name] = extracted.read()
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise UserError(f"{path} is a corrupt archive ({exc}): pass {how}.") from None
    try:
        manifest = json.loads(files.pop(MANIFEST))
    except (KeyError, ValueError):
        raise UserError(f"{path} has no readable {PREFIX}/{MANIFEST}: it is not {how}.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserError(f"{path} is not a {FORMAT} bundle (its manifest says "
                        f"{manifest.get('format') if isinstance(manifest, dict) else manifest!r}): pass {how}.")
    listed = manifest.get("files") or {}
    if set(listed) != set(files):
        extra, missing = sorted(set(files) - set(listed)), sorted(set(listed) - set(files))
        raise UserError(f"{path} does not match its manifest (unlisted: {extra[:3]}, missing: {missing[:3]}): "
                        "the bundle is damaged; make it again with `tbdkit bundle`.")
    for name, data in files.items():
        if sha256(data) != listed[name].get("sha256"):
            raise UserError(f"{path}: {name} does not match its sha256 in the manifest: the bundle is damaged "
                            "or was changed; make it again with `tbdkit bundle`.")
    return manifest, files


def recorded_runs(files: dict[str, bytes]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(spec, summary) of each ok run in a bundle, in run-id order."""
    out = []
    for name in sorted(files):
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == "results" and parts[2] == "summary.json":
            try:  # a damaged run is not one to reproduce
                summary = summaries.parse(files[name], parts[1])
                spec = json.loads(files.get(f"results/{parts[1]}/spec.json", b""))
            except (summaries.Unreadable, ValueError, RecursionError):
                continue
            if summary.get("status") == "ok" and isinstance(spec, dict):
                out.append((spec, summary))
    return out


def _number(summary: dict[str, Any], metric: str) -> tuple[float | None, str | None]:
    m = (summary.get("metrics") or {}).get(metric) or {}
    value = m.get("value")
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return (float(value) if ok else None), m.get("unit")


def compare(recorded: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """One point: new / recorded for each headline metric with a number in both runs."""
    ratios: dict[str, Any] = {}
    for metric in HEADLINE:
        old_v, unit = _number(recorded, metric)
        new_v, _ = _number(new, metric)
        if old_v is None and new_v is None:
            continue
        ratio = new_v / old_v if old_v not in (None, 0.0) and new_v is not None else None
        reason = None if ratio is not None else (
            "the new run did not finish ok" if new.get("status") != "ok" else
            "no number in the recorded run" if old_v is None else
            "no number in the new run" if new_v is None else "the recorded value is 0")
        ratios[metric] = {"recorded": old_v, "new": new_v, "unit": unit, "ratio": ratio, "reason": reason}
    return {
        "recorded_run": recorded.get("run_id"), "new_run": new.get("run_id"), "new_status": new.get("status"),
        "model": recorded.get("model"), "framework": recorded.get("framework"),
        "batch_size": recorded.get("batch_size"), "precision": recorded.get("precision"),
        "recorded_device": recorded.get("device"), "new_device": new.get("device"),
        "metrics": ratios,
    }
