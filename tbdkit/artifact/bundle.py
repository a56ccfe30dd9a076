"""Artifact bundles: a results folder as one tar.gz a reviewer can check and re-run.

Layout (every member under `tbdkit-artifact/`):
  manifest.json         format, kit version, creation time, the runs and sweeps, the report's
                        status, what was left out and why, the placeholders that replaced this
                        machine's paths, and the sha256 and size of every other member
  results/<run-id>/...  each run folder's files that the kit writes (tbdkit.results.files), no others
  results/sweeps/...    the sweeps' state, and their probes' run files
  images.lock           the pinned framework images (docker/images.lock)
  locks/<lock>.txt      the hashed lock of each environment the runs ran in (env.json's `lock`), so a
                        reviewer recreates it: `pip install --require-hashes --no-deps -r locks/<lock>.txt`
  report/...            the HTML report, when `tbdkit.report.build_report` is importable
  workloads/<model>/... the folder of each model from outside the kit the runs trained (their spec.json
                        records a sha256 of each file; tbdkit.artifact.workloads)

What a bundle never carries: files the kit did not write (a `.env`, keys, notes: listed as
excluded), anything reached through a symbolic link (links are listed, never followed), the
results index (rebuilt from the run folders), broken runs (no readable spec.json and
summary.json, or a spec.json that is not a valid run spec: listed with the reason), this machine's
absolute paths (the results folder, the kit's root, the stacks' folder and the home folder become
`<results>`, `<kit>`, `<venvs>`, `~`) and its host name (`<host>`). A run's large timelines travel
gzip-compressed (`<name>.gz`, the manifest's "compressed") or, larger still, stay out ("excluded").

Reading a bundle (tbdkit.artifact.unpack) checks it before anything is kept: the manifest first,
then each member's name and size against it before its bytes, streamed to disk and hashed, the
whole capped (tbdkit.artifact.layout).
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import importlib
import io
import json
import os
import re
import socket
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from tbdkit import __version__
from tbdkit.analysis.trace import TRACES_DIR
from tbdkit.artifact import doc as artifact_doc
from tbdkit.artifact import workloads as carried_workloads
from tbdkit.artifact.layout import (
    COMPRESS_ABOVE,
    FORMAT,
    LEAVE_OUT_ABOVE,
    MANIFEST,
    MAX_MEMBERS,
    MAX_UNPACKED_BYTES,
    PREFIX,
)
from tbdkit.artifact.unpack import Members as Members  # re-exported: artifact.read, artifact.Members
from tbdkit.artifact.unpack import is_bundle as is_bundle
from tbdkit.artifact.unpack import read as read
from tbdkit.core import atomic
from tbdkit.core.errors import UserError
from tbdkit.core.paths import KIT_ROOT, venvs_dir
from tbdkit.env import locks
from tbdkit.results import files as runfiles
from tbdkit.results import readers
from tbdkit.results.summary import MEASURED
from tbdkit.spec import run_spec as specs

ARTIFACT_MD = "ARTIFACT.md"
CALIBRATION = "calibration.json"  # a results folder's calibration (tbdkit calibrate; tbdkit.env.machine)
LOCKS = "locks"  # the stacks' lock files, locks/*.txt, at the kit's root
# The kit's own files a bundle carries at its top, and what each is.
KIT_FILES = {
    "CITATION.cff": "how to cite the kit and the TBD paper",
    ".zenodo.json": "the metadata for an archival DOI (Zenodo)",
    "LICENSE": "the kit's license",
}
INDEX_FILES = ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm", "index.sqlite-journal")
# Metrics compared by `reproduce`, when present with a number in both runs.
HEADLINE = (
    "throughput",
    "sample_throughput",
    "gpu_utilization",
    "fp32_utilization",
    "tensor_utilization",
    "cpu_utilization",
    "gpu_memory_used_peak",
    "framework_peak_allocated",
    "peak_rss",
)
TEXT_SUFFIXES = {".json", ".csv", ".txt", ".log", ".html", ".htm", ".md", ".svg"}
PLACEHOLDERS = {
    "<results>": "the results folder that was bundled",
    "<kit>": "the root folder of the kit that made the runs",
    "<venvs>": "the folder of the framework stacks' virtual environments",
    "~": "the home folder of the user who made the bundle",
    "<host>": "the host name of the machine that made the bundle",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_report_into(results: Path, out_dir: Path) -> dict[str, Any]:
    """The report, made by the report package when this kit has it: {included, path | reason}."""
    try:
        report = importlib.import_module("tbdkit.report")
        build = report.build_report
    except (ImportError, AttributeError):
        return {"included": False, "reason": "this kit has no report builder (tbdkit.report.build_report)"}
    try:
        html = Path(build(results, out_dir))
    except Exception as exc:  # a broken report must not lose the bundle of results
        return {"included": False, "reason": f"building the report failed: {type(exc).__name__}: {exc}"}
    return {"included": True, "path": f"report/{html.relative_to(out_dir).as_posix()}"}


# ---------------------------------------------------------------- this machine's paths and name


class Scrubber:
    """Replaces this machine's absolute paths by placeholders and its host name by `<host>`."""

    def __init__(self, results: Path, host: str | None = None) -> None:
        prefixes: dict[str, str] = {}
        for path, mark in (
            (results.absolute(), "<results>"),
            (results.resolve(), "<results>"),
            (KIT_ROOT, "<kit>"),
            (KIT_ROOT.resolve(), "<kit>"),
            (venvs_dir().absolute(), "<venvs>"),
            (venvs_dir().resolve(), "<venvs>"),
            (Path.home(), "~"),
            (Path.home().resolve(), "~"),
        ):
            text = str(path).rstrip("/")
            if text.count("/") >= 1 and text not in prefixes and len(text) > 1:
                prefixes[text] = mark
        # longest first: the results folder inside the kit is <results>, not <kit>/results
        ordered = sorted(prefixes, key=len, reverse=True)
        self.marks = prefixes
        self.paths = re.compile("|".join(rf"(?:{re.escape(p)})(?![\w.-])" for p in ordered)) if ordered else None
        host = socket.gethostname() if host is None else host
        # a name this short or this common would replace ordinary words
        self.host = (
            re.compile(rf"(?<![\w.-]){re.escape(host)}(?![\w-])")
            if len(host) >= 3 and host not in ("localhost", "ubuntu", "debian")
            else None
        )
        self.host_name = host

    def text(self, value: str) -> str:
        if self.paths is not None:
            value = self.paths.sub(lambda m: self.marks[m.group(0)], value)
        if self.host is not None:
            value = self.host.sub("<host>", value)
        return value

    def _json(self, value: Any, key: str | None = None) -> Any:
        if isinstance(value, str):
            return "<host>" if key == "hostname" and value else self.text(value)
        if isinstance(value, dict):
            return {self.text(k): self._json(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self._json(v) for v in value]
        return value

    def file(self, name: str, data: bytes) -> bytes:
        """The file as the bundle carries it: unchanged when it holds nothing to replace."""
        suffix = PurePosixPath(name).suffix
        if suffix not in TEXT_SUFFIXES:
            return data
        if suffix == ".json":
            try:
                doc = json.loads(data)
                cleaned = self._json(doc)
            except (ValueError, RecursionError):  # not JSON (or nested past the stack): replaced as text
                pass
            else:
                return data if cleaned == doc else (json.dumps(cleaned, indent=2) + "\n").encode()
        text = data.decode("utf-8", errors="surrogateescape")
        cleaned_text = self.text(text)
        return data if cleaned_text == text else cleaned_text.encode("utf-8", errors="surrogateescape")


# ---------------------------------------------------------------- what a results folder holds


@dataclass
class Collected:
    """The members a bundle carries (name below the prefix -> bytes), the runs among them,
    and what was left out: {"path", "reason"} for files, {"run", "reason"} for broken runs."""

    files: dict[str, bytes] = field(default_factory=dict)
    compressed: dict[str, dict[str, Any]] = field(default_factory=dict)  # member.gz -> {of, method, bytes, sha256}
    runs: list[str] = field(default_factory=list)
    excluded: list[dict[str, str]] = field(default_factory=list)
    broken_runs: list[dict[str, str]] = field(default_factory=list)

    def exclude(self, path: str, reason: str) -> None:
        self.excluded.append({"path": path, "reason": reason})


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as it:
        return sorted(it, key=lambda e: e.name)


def _skip_reason(entry: os.DirEntry[str]) -> str | None:
    """Why an entry is never packed whatever its name: a link, a hidden file, a device or pipe."""
    if entry.is_symlink():
        return "a symbolic link: links are never followed (what it points to stays out)"
    if entry.name.startswith("."):
        return "a hidden file or folder: not written by the kit"
    if not (entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False)):
        return "not a regular file"
    return None


def _broken(run: Path) -> str | None:
    """Why a run folder cannot be packed as a run, or None if it can."""
    for name in (runfiles.SPEC, runfiles.SUMMARY):
        path = run / name
        if path.is_symlink() or not path.is_file():
            return f"no {name}" + (
                " (the run is still going, or its agent was killed)" if name == runfiles.SUMMARY else ""
            )
        try:
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError) as exc:
            return f"{name} is not readable JSON ({type(exc).__name__}: {str(exc)[:200]})"
        if not isinstance(doc, dict):
            return f"{name} holds a {type(doc).__name__}, not an object"
        if name == runfiles.SPEC:
            try:  # what ARTIFACT.md's regenerate lines and `reproduce` are made from: a spec the kit would run
                specs.parse(doc, recorded=True)
            except UserError as exc:
                return f"{name} is not a valid run spec ({str(exc).removeprefix('Invalid run spec: ')[:300]})"
    return None


def _collect_run(run: Path, member: str, out: Collected, scrub: Scrubber) -> bool:
    """Pack one run folder's run files under `member`; False (and listed) if the run is broken."""
    reason = _broken(run)
    if reason is not None:
        out.broken_runs.append({"run": member.removeprefix("results/"), "reason": reason})
        return False

    def walk(folder: Path, relative: PurePosixPath) -> None:
        for entry in _entries(folder):
            rel = relative / entry.name
            shown = f"{member}/{rel.as_posix()}".removeprefix("results/")
            skip = _skip_reason(entry)
            if skip is not None:
                out.exclude(shown, skip)
            elif entry.is_dir(follow_symlinks=False):
                if runfiles.is_worker_dir(rel):
                    walk(Path(entry.path), rel)
                else:
                    out.exclude(
                        shown + "/",
                        {
                            "ncu": "the Nsight Compute scratch pass (its numbers are in ncu_raw.csv and summary.json)",
                            TRACES_DIR: "the ranks' trace.json again, as links for Holistic Trace Analysis (the "
                            "bundle holds each trace.json)",
                        }.get(entry.name, "a folder the kit does not keep in a run"),
                    )
            elif runfiles.is_run_file(rel):
                name = f"{member}/{rel.as_posix()}"
                if rel.name in runfiles.TRACES:
                    _collect_trace(Path(entry.path), name, out, scrub)
                else:
                    out.files[name] = scrub.file(name, Path(entry.path).read_bytes())
            else:
                out.exclude(shown, "not a file the kit writes into a run folder")

    walk(run, PurePosixPath())
    return True


def _collect_trace(path: Path, name: str, out: Collected, scrub: Scrubber) -> None:
    """A run's timeline (trace.json, profiler_trace.json) as it is when small; above COMPRESS_ABOVE
    gzip-compressed as <name>.gz (listed under the manifest's "compressed"); left out, and said,
    when still above LEAVE_OUT_ABOVE compressed (a Deep Speech 2 profile can pass 100 MB)."""
    size = path.stat().st_size
    if size <= COMPRESS_ABOVE:
        out.files[name] = scrub.file(name, path.read_bytes())
        return
    data = scrub.file(name, path.read_bytes())
    packed = gzip.compress(data, compresslevel=6, mtime=0)
    shown = name.removeprefix("results/")
    if len(packed) > LEAVE_OUT_ABOVE:
        out.exclude(
            shown,
            f"a trace of {size / 2**20:,.0f} MiB ({len(packed) / 2**20:,.0f} MiB compressed, over "
            f"{LEAVE_OUT_ABOVE / 2**20:.0f} MiB): left out of the bundle; the run folder keeps it",
        )
        return
    out.files[f"{name}.gz"] = packed
    out.compressed[f"{name}.gz"] = {"of": name, "method": "gzip", "bytes": len(data), "sha256": sha256(data)}


def _collect_sweeps(sweeps: Path, out: Collected, scrub: Scrubber) -> None:
    for entry in _entries(sweeps):
        shown = f"{runfiles.SWEEPS}/{entry.name}"
        skip = _skip_reason(entry) or (None if entry.is_dir(follow_symlinks=False) else "not a sweep's folder")
        if skip is not None:
            out.exclude(shown, skip)
            continue
        for inner in _entries(Path(entry.path)):
            inner_shown = f"{shown}/{inner.name}"
            skip = _skip_reason(inner)
            if skip is not None:
                out.exclude(inner_shown, skip)
            elif inner.name == runfiles.SWEEP_STATE and inner.is_file(follow_symlinks=False):
                name = f"results/{inner_shown}"
                out.files[name] = scrub.file(name, Path(inner.path).read_bytes())
            elif inner.name == runfiles.PROBES and inner.is_dir(follow_symlinks=False):
                for probe in _entries(Path(inner.path)):
                    probe_shown = f"{inner_shown}/{probe.name}"
                    skip = _skip_reason(probe) or (None if probe.is_dir(follow_symlinks=False) else "not a run folder")
                    if skip is not None:
                        out.exclude(probe_shown, skip)
                    else:
                        _collect_run(Path(probe.path), f"results/{probe_shown}", out, scrub)
            else:
                out.exclude(inner_shown, "not a file the kit writes into a sweep's folder")


def collect(results: Path, scrub: Scrubber | None = None) -> Collected:
    """Every member the bundle carries, and what it leaves out and why."""
    if not results.is_dir():
        raise UserError(
            f"No results folder at {results}: run `tbdkit bench` or `tbdkit sweep` first, or pass its path."
        )
    scrub = scrub or Scrubber(results)
    out = Collected()
    for entry in _entries(results):
        skip = _skip_reason(entry)
        if skip is not None:
            out.exclude(entry.name, skip)
        elif entry.name == CALIBRATION and entry.is_file(follow_symlinks=False):
            name = f"results/{CALIBRATION}"
            out.files[name] = scrub.file(name, Path(entry.path).read_bytes())
        elif entry.name in INDEX_FILES:
            out.exclude(entry.name, "the results index: rebuilt from the run folders (`tbdkit runs --rebuild`)")
        elif entry.name == runfiles.SWEEPS and entry.is_dir(follow_symlinks=False):
            _collect_sweeps(Path(entry.path), out, scrub)
        elif entry.is_dir(follow_symlinks=False):
            if _collect_run(Path(entry.path), f"results/{entry.name}", out, scrub):
                out.runs.append(entry.name)
        else:
            out.exclude(entry.name, "not a run folder (a file beside the runs)")
    if not out.runs:
        broken = (
            f" ({len(out.broken_runs)} broken: {out.broken_runs[0]['run']}: {out.broken_runs[0]['reason']})"
            if out.broken_runs
            else ""
        )
        raise UserError(
            f"{results} holds no runs (folders with a spec.json and a summary.json){broken}: nothing to bundle."
        )
    lock = KIT_ROOT / "docker" / "images.lock"
    if lock.is_file():
        out.files["images.lock"] = lock.read_bytes()
    lock_dir = KIT_ROOT / LOCKS
    if lock_dir.is_dir():  # every environment's lock: the runs' own and the others a reviewer may recreate
        for path in sorted(lock_dir.glob("*.txt")):
            if path.is_file() and not path.is_symlink():
                out.files[f"{LOCKS}/{path.name}"] = path.read_bytes()
    for name in KIT_FILES:
        path = KIT_ROOT / name
        if path.is_file() and not path.is_symlink():
            out.files[name] = path.read_bytes()
    return out


def run_locks(files: Mapping[str, bytes]) -> dict[str, dict[str, Any]]:
    """{run id: env.json's `lock` (name, digest, differences)} of each run in a bundle's files that has one."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(files):
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == "results" and parts[2] == runfiles.ENV:
            lock = (_object(files[name]) or {}).get("lock")
            if isinstance(lock, dict) and isinstance(lock.get("name"), str):
                out[parts[1]] = lock
    return out


def lock_mismatches(files: Mapping[str, bytes], run_ids: list[str]) -> list[dict[str, Any]]:
    """For each of `run_ids` whose run was made on another lock than this kit's lock of the same name:
    the lock, both digests and the packages whose pins differ (the bundle's lock file against this kit's;
    None when the bundle does not carry it)."""
    out: list[dict[str, Any]] = []
    recorded = run_locks(files)
    for run_id in run_ids:
        lock = recorded.get(run_id)
        if lock is None or lock["name"] not in locks.ENVS:
            continue
        env = locks.get(lock["name"])
        here = locks.digest(env.file) if env.file.is_file() else None
        if lock.get("digest") == here:
            continue
        carried = files.get(f"{LOCKS}/{env.file.name}")
        carried_ok = carried is not None and hashlib.sha256(carried).hexdigest()[:16] == lock.get("digest")
        diffs = None
        if carried_ok and here is not None:
            assert carried is not None
            diffs = [
                {"package": d["package"], "recorded": d["locked"], "here": d["installed"]}
                for d in locks.differences(locks.pins(carried.decode()), locks.pins(env.file.read_text()))
            ]
        out.append(
            {
                "run": run_id,
                "lock": env.name,
                "recorded_digest": lock.get("digest"),
                "digest_here": here,
                "differences": diffs,
                "reason": None if diffs is not None else "the bundle does not carry the lock its run was made on",
            }
        )
    return out


def contents(files: Mapping[str, bytes]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """What the bundle holds beside the runs (member -> what it is), and what it should hold but the
    kit does not have ({"path", "reason"})."""
    held: dict[str, str] = {
        "manifest.json": "every member's sha256 and size; what was left out and why",
        "results/": "each run folder's files (spec, env, iterations, samples, summary, trace, mllog, ...)",
    }
    if any(n.startswith(f"{carried_workloads.FOLDER}/") for n in files):
        held[f"{carried_workloads.FOLDER}/"] = "the folder of each model from outside the kit that the runs trained"
    if any(n.startswith("report/") for n in files):
        held["report/"] = "the HTML and Markdown report, its figures, summary.csv"
    missing = []
    for name, what in (
        ("images.lock", "the framework images' pinned digests"),
        (f"results/{CALIBRATION}", "the calibration of the machine that made the runs"),
        *((n, what) for n, what in KIT_FILES.items()),
    ):
        if name in files:
            held[name] = what
        else:
            missing.append({"path": name, "reason": f"not in this kit or results folder ({what})"})
    for name in sorted(n for n in files if n.startswith(f"{LOCKS}/")):
        held[name] = "a framework stack's pinned packages"
    if not any(n.startswith(f"{LOCKS}/") for n in files):
        missing.append({"path": f"{LOCKS}/*.txt", "reason": "the kit has no locks/ folder"})
    return held, missing


def bundle(results: Path, out: Path) -> dict[str, Any]:
    """Write the bundle atomically; returns its manifest."""
    scrub = Scrubber(results)
    collected = collect(results, scrub)
    files = collected.files
    models = carried_workloads.carry(files)  # outside models' folders, as they are (code is never scrubbed)
    files.update(models.files)
    with tempfile.TemporaryDirectory(prefix="tbdkit-report-") as tmp:
        report = build_report_into(results, Path(tmp))
        if report["included"]:
            for path in sorted(p for p in Path(tmp).rglob("*") if p.is_file() and not p.is_symlink()):
                name = f"report/{path.relative_to(tmp).as_posix()}"
                files[name] = scrub.file(name, path.read_bytes())
        if not report["included"]:
            report["reason"] = scrub.text(report["reason"])
    held, missing = contents(files)
    missing += [{"path": m["path"], "reason": scrub.text(m["reason"])} for m in models.missing]
    try:
        files[ARTIFACT_MD] = scrub.file(ARTIFACT_MD, artifact_doc.render(results, files, held).encode())
    except Exception as exc:  # a guide that cannot be made must not lose the bundle of results
        missing.append(
            {"path": ARTIFACT_MD, "reason": scrub.text(f"generating it failed: {type(exc).__name__}: {exc}")}
        )
    manifest = {
        "format": FORMAT,
        "kit_version": __version__,
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": sorted(collected.runs),
        "sweeps": sorted({n.split("/")[2] for n in files if n.startswith("results/sweeps/")}),
        "report": report,
        "images_lock": "images.lock" if "images.lock" in files else None,
        "guide": ARTIFACT_MD if ARTIFACT_MD in files else None,
        "missing": missing,
        "locks": {
            n: {
                "digest": sha256(files[n])[:16],
                "install": f"pip install --require-hashes --no-deps -r {n} && pip install --no-deps -e <kit>",
            }
            for n in sorted(files)
            if n.startswith(f"{LOCKS}/")
        },
        "excluded": [{"path": scrub.text(e["path"]), "reason": scrub.text(e["reason"])} for e in collected.excluded],
        "broken_runs": [
            {"run": scrub.text(b["run"]), "reason": scrub.text(b["reason"])} for b in collected.broken_runs
        ],
        "workloads": models.models,
        "placeholders": PLACEHOLDERS,
        "compressed": collected.compressed,
        "files": {name: {"sha256": sha256(data), "bytes": len(data)} for name, data in sorted(files.items())},
    }
    total = sum(len(data) for data in files.values())
    if total > MAX_UNPACKED_BYTES or len(files) > MAX_MEMBERS:
        raise UserError(
            f"{results} makes a bundle of {len(files):,} files and {total / 2**30:,.1f} GiB, over what a reader accepts "
            f"({MAX_MEMBERS:,} files, {MAX_UNPACKED_BYTES / 2**30:.0f} GiB unpacked): bundle fewer runs at a time "
            "(a results folder of its own for each)."
        )
    write_archive(out, [(MANIFEST, json.dumps(manifest, indent=2).encode()), *sorted(files.items())])
    return manifest


def write_archive(out: Path, members: list[tuple[str, bytes]]) -> None:
    """The tar.gz at `out`, written beside it and renamed over it; on a full disk (or any refusal to
    write) nothing is left behind, and a UserError says what to free."""
    try:
        with atomic.replacing(out) as tmp_out, tarfile.open(tmp_out, "w:gz") as tar:
            for name, data in members:
                info = tarfile.TarInfo(f"{PREFIX}/{name}")
                info.size, info.mode, info.mtime = len(data), 0o644, int(dt.datetime.now().timestamp())
                tar.addfile(info, io.BytesIO(data))
    except OSError as exc:
        need = sum(len(data) for _, data in members)
        raise UserError(
            f"The bundle could not be written to {out} ({exc.strerror or exc}); nothing was left there. Free "
            f"space there (its files hold {need / 2**20:,.1f} MiB before compression) or pass -o on another disk."
        ) from None


def _object(data: bytes) -> dict[str, Any] | None:
    return readers.json_of(data)


def local_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A recorded spec with its data path's placeholders (`<kit>/`, `~/`) made paths of this machine."""
    data = spec.get("data")
    if isinstance(data, str) and data.startswith("<kit>/"):
        return {**spec, "data": str(KIT_ROOT / data.removeprefix("<kit>/"))}
    if isinstance(data, str) and data.startswith("~/"):
        return {**spec, "data": str(Path(data).expanduser())}
    return spec


def recorded_runs(files: Mapping[str, bytes]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(spec, summary) of each run `reproduce` re-runs (artifact_doc.reproduced: every run that finished,
    ok or disturbed, with a spec), in run-id order; ARTIFACT.md lists the same runs."""
    return [(local_spec(r.spec), r.summary) for r in artifact_doc.reproduced(files)]


def _number(summary: dict[str, Any], metric: str) -> tuple[float | None, str | None]:
    m = (summary.get("metrics") or {}).get(metric) or {}
    return readers.finite(m.get("value")), m.get("unit")


def compare(recorded: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """One point: new / recorded for each headline metric with a number in both runs."""
    ratios: dict[str, Any] = {}
    for metric in HEADLINE:
        old_v, unit = _number(recorded, metric)
        new_v, _ = _number(new, metric)
        if old_v is None and new_v is None:
            continue
        ratio = new_v / old_v if old_v not in (None, 0.0) and new_v is not None else None
        reason = (
            None
            if ratio is not None
            else (
                "the new run did not finish ok"
                if new.get("status") not in MEASURED
                else "no number in the recorded run"
                if old_v is None
                else "no number in the new run"
                if new_v is None
                else "the recorded value is 0"
            )
        )
        ratios[metric] = {
            "recorded": old_v,
            "new": new_v,
            "unit": unit,
            "ratio": ratio,
            "reason": reason,
            "recorded_ci95_relative": _ci_relative(recorded, metric),
            "new_ci95_relative": _ci_relative(new, metric),
        }
    return {
        "recorded_run": recorded.get("run_id"),
        "new_run": new.get("run_id"),
        "recorded_status": recorded.get("status"),
        "recorded_disturbed_reasons": recorded.get("disturbed_reasons") or [],
        "new_status": new.get("status"),
        "new_disturbed_reasons": new.get("disturbed_reasons") or [],
        "model": recorded.get("model"),
        "framework": recorded.get("framework"),
        "batch_size": recorded.get("batch_size"),
        "precision": recorded.get("precision"),
        "recorded_device": recorded.get("device"),
        "new_device": new.get("device"),
        "metrics": ratios,
    }


def _ci_relative(summary: dict[str, Any], metric: str) -> float | None:
    return readers.non_negative(((summary.get("metrics") or {}).get(metric) or {}).get("ci95_relative"))


# ---------------------------------------------------------------- verdicts of a reproduction

REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE = "reproduced", "not reproduced", "not comparable"


def disturbed_note(point: dict[str, Any]) -> str | None:
    """What a disturbed recorded run or re-run means for a point's verdict, or None when neither was."""
    sides = [
        f"the {side} run was disturbed ({'; '.join(point.get(f'{side}_disturbed_reasons') or []) or 'no reason recorded'})"
        for side in ("recorded", "new")
        if point.get(f"{side}_status") == "disturbed"
    ]
    if not sides:
        return None
    return (
        " and ".join(sides) + ": its throughput was measured beside other load, so a difference may be that "
        "load's doing rather than the kit's; re-run on a quiet machine before concluding from it"
    )


def run_verdict(point: dict[str, Any], recorded_device: str, new_device: str) -> dict[str, str]:
    """Whether a re-run reproduced its recorded run: {verdict, reason}. Throughput decides: new /
    recorded within 1 ± the tolerance of ARTIFACT.md (artifact_doc.tolerance: the two 95% intervals
    overlap, at least 2%). Where `tbdkit compare` is present, its ratio and CI replace this rule:
    `point["metrics"]["throughput"]` holds the recorded and new values and CIs it needs. A disturbed
    recorded run or re-run keeps its verdict, flagged (`disturbed`: what that means for it)."""
    verdict = _run_verdict(point, recorded_device, new_device)
    note = disturbed_note(point)
    return verdict if note is None else {**verdict, "disturbed": note}


def _run_verdict(point: dict[str, Any], recorded_device: str, new_device: str) -> dict[str, str]:
    if point.get("new_status") not in MEASURED:
        return {"verdict": NOT_REPRODUCED, "reason": f"the new run ended {point.get('new_status')}"}
    if recorded_device != new_device:
        return {
            "verdict": NOT_COMPARABLE,
            "reason": f"different device: recorded on {recorded_device}, re-run on {new_device}",
        }
    thr = (point.get("metrics") or {}).get("throughput") or {}
    ratio = thr.get("ratio")
    if ratio is None:
        return {"verdict": NOT_COMPARABLE, "reason": f"no throughput ratio ({thr.get('reason') or 'no throughput'})"}
    t = artifact_doc.tolerance(thr.get("recorded_ci95_relative"), thr.get("new_ci95_relative"))
    within = abs(ratio - 1.0) <= t
    return {
        "verdict": REPRODUCED if within else NOT_REPRODUCED,
        "reason": f"throughput ratio {ratio:.3f} {'within' if within else 'outside'} 1 ± {t:.1%} "
        "(the two runs' 95% intervals added, at least 2%"
        + (
            "; a run without a CI adds nothing)"
            if None in (thr.get("recorded_ci95_relative"), thr.get("new_ci95_relative"))
            else ")"
        ),
    }


def recorded_env(files: Mapping[str, bytes], run_id: str) -> dict[str, Any]:
    return _object(files.get(f"results/{run_id}/{runfiles.ENV}", b"")) or {}


def claim_verdicts(files: Mapping[str, bytes], new_run_dirs: list[Path]) -> list[dict[str, Any]]:
    """Each of the paper's observations as the bundled runs decide it and as the re-runs decide it:
    reproduced (the same verdict), not reproduced (another), or not comparable (either side cannot
    decide it, e.g. it needs GPU runs, or the runs are on another device)."""
    from tbdkit.report import claims
    from tbdkit.report.runs import for_claims, load_dirs, without_failed_metrics

    with tempfile.TemporaryDirectory(prefix="tbdkit-recorded-") as tmp:
        for name, data in files.items():
            parts = PurePosixPath(name).parts
            if len(parts) == 3 and parts[0] == "results" and parts[2] in runfiles.RUN_FILES:
                path = Path(tmp, *parts[1:])
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        recorded = without_failed_metrics(for_claims(load_dirs(sorted(p for p in Path(tmp).iterdir() if p.is_dir()))))
    new = without_failed_metrics(for_claims(load_dirs(new_run_dirs)))  # disturbed runs left out, as the report does
    old_devices, new_devices = {r.device_name for r in recorded}, {r.device_name for r in new}
    out = []
    for before, after in zip(claims.check_all(recorded), claims.check_all(new)):
        entry = {"n": before.n, "claim": before.claim, "recorded": before.verdict, "new": after.verdict}
        if before.verdict in claims.UNDECIDED or after.verdict in claims.UNDECIDED:
            side = before if before.verdict in claims.UNDECIDED else after
            why = (side.evidence or [side.rule])[0]
            entry.update(
                verdict=NOT_COMPARABLE, reason=why if why.startswith(side.verdict) else f"{side.verdict}: {why}"
            )
        elif old_devices != new_devices:
            entry.update(
                verdict=NOT_COMPARABLE,
                reason=f"different devices: recorded on {sorted(old_devices)}, re-run on {sorted(new_devices)}",
            )
        else:
            same = before.verdict == after.verdict
            entry.update(
                verdict=REPRODUCED if same else NOT_REPRODUCED,
                reason=f"recorded: {before.verdict}; re-run: {after.verdict}",
            )
        out.append(entry)
    return out
