"""Reading run folders back: the one set of tolerant readers, for every reader of run files (the
report, compare, sweeps, scaling, the artifact's guide and `reproduce`).

A file that is missing or damaged is read as not measured (an empty object, no rows), never fatal:
one bad run must not break a command over a whole results folder. The summary always goes through its
model (tbdkit.results.summary). Two readings refuse damage instead of skipping it, because a verdict
would rest on them: the sample window's iterations (`window`, one rule for every statistic over them)
and the finished runs of an index (`finished`, each at the path the index gives, never joined again).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from tbdkit.results import files
from tbdkit.results import summary as summaries
from tbdkit.results.index import Index
from tbdkit.results.rundir import RunDir
from tbdkit.results.summary import MEASURED

# ---------------------------------------------------------------- one file


def json_of(data: bytes | str) -> dict[str, Any] | None:
    """A JSON object's text as a dict; None when it is not JSON or not an object."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not text, nested too deeply
        return None
    return doc if isinstance(doc, dict) else None


def json_object(path: Path) -> dict[str, Any]:
    """A run file holding a JSON object (env.json, spec.json, memory.json); {} when it is missing,
    unreadable, not JSON or not an object (read as not measured)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return {}
    return json_of(data) or {}


def objects(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """`data` with each of `keys` that is not an object (damaged file) left out: read as not measured."""
    return {k: v for k, v in data.items() if k not in keys or isinstance(v, dict)}


def finite(value: Any) -> float | None:
    """A JSON value as a finite float; None for anything else (null, text, a bool, NaN, infinity, an integer past a
    float's range: JSON's integers have no bound)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value) if math.isfinite(value) else None
    except OverflowError:
        return None


def non_negative(value: Any) -> float | None:
    """A JSON value as a finite number not below 0 (a width, a share of a peak), else None: a damaged or forged
    file's negative, NaN or 400 digits."""
    number = finite(value)
    return number if number is not None and number >= 0 else None


MAX_ITERATIONS = 10**9  # a count of iterations above this is no run's (a damaged or forged file)


def count(value: Any, most: int) -> int | None:
    """A JSON value as a whole number from 1 to `most` (workers, SMs, iterations), else None: null, text, a bool, a
    fraction, 0 or less, or more than any run has (a damaged or forged file)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most
    return value if ok else None


def number(text: str | None) -> float | None:
    """A CSV cell as a finite float; None when it is empty or not a number."""
    try:
        value = float(text.strip()) if isinstance(text, str) and text.strip() else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def summary_or_none(run_dir: Path) -> dict[str, Any] | None:
    """A run folder's checked summary, or None when it has none (still running, lost) or a damaged one."""
    try:
        return summaries.read(run_dir)
    except (OSError, summaries.Unreadable):
        return None


def kernels(path: Path) -> list[dict[str, Any]]:
    """kernels.csv's rows; a damaged file or cell is read as not measured."""
    if not Path(path).is_file():
        return []
    rows = []
    try:
        with Path(path).open(newline="", errors="replace") as fh:
            for row in csv.DictReader(fh):
                parsed: dict[str, Any] = {
                    "kernel": str(row.get("kernel") or ""),
                    "method": str(row.get("method") or ""),
                }
                for key in files.KERNEL_COLUMNS:
                    if key not in parsed:  # every column but the two texts is a number
                        parsed[key] = number(row.get(key))
                rows.append(parsed)
    except (OSError, csv.Error):
        return []
    return rows


# ---------------------------------------------------------------- the sample window


@dataclass(frozen=True)
class Window:
    """The sample window's iterations as iterations.csv holds them: each one's work and seconds."""

    works: list[float]
    seconds: list[float]

    def __len__(self) -> int:
        return len(self.works)

    @property
    def rates(self) -> list[float]:
        """Each iteration's throughput, work / seconds."""
        return [w / s for w, s in zip(self.works, self.seconds)]


def window(run_dir: Path, span: Mapping[str, Any] | None = None) -> Window:
    """The sample window's iterations of a run folder: iterations.csv's rows of phase 'measure' whose
    iteration lies in the summary's window (`span`: first_iteration..last_iteration, where recorded).
    OSError when the file is missing or cannot be read. A row of the window whose iteration, work or
    seconds is not a finite positive number (zero, negative, NaN, infinite, text) makes the window
    summaries.Unreadable: no statistic is computed over damaged iterations."""
    span = span or {}
    first, last = finite(span.get("first_iteration")), finite(span.get("last_iteration"))
    works: list[float] = []
    seconds: list[float] = []
    where = f"{Path(run_dir).name}: {files.ITERATIONS}"
    try:
        with RunDir(run_dir).iterations.open(newline="", errors="replace") as fh:
            for line, row in enumerate(csv.DictReader(fh), start=2):
                if row.get("phase") != "measure":
                    continue
                i = number(row.get("iteration"))
                if i is not None and ((first is not None and i < first) or (last is not None and i > last)):
                    continue
                cells = {name: number(row.get(name)) for name in ("work", "seconds")}
                bad = [f"{name} {row.get(name)!r}" for name, v in cells.items() if v is None or v <= 0]
                if i is None or bad:
                    what = "; ".join(bad or [f"iteration {row.get('iteration')!r}"])
                    raise summaries.Unreadable(
                        where, f"line {line} of the sample window has {what}, not a positive number"
                    )
                works.append(cells["work"] or 0.0)
                seconds.append(cells["seconds"] or 0.0)
    except csv.Error as exc:
        raise summaries.Unreadable(where, f"not CSV ({exc})") from None
    return Window(works, seconds)


def window_cv(run_dir: Path, span: Mapping[str, Any] | None = None) -> float | None:
    """Coefficient of variation (sample stdev / mean) of the per-iteration throughput over a run's
    sample window (`window`); None with fewer than 2 iterations, or none readable."""
    try:
        rates = window(run_dir, span).rates
    except (OSError, summaries.Unreadable):
        return None
    if len(rates) < 2:
        return None
    mean = sum(rates) / len(rates)
    return math.sqrt(sum((r - mean) ** 2 for r in rates) / (len(rates) - 1)) / mean


# ---------------------------------------------------------------- a whole run


@dataclass
class RunFiles:
    """One finished run folder as read: its checked summary and its other JSON and CSV files
    (each {} or [] where missing or damaged)."""

    path: Path
    summary: dict[str, Any]
    env: dict[str, Any] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] | None = None
    kernels: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.summary.get("run_id") or self.path.name)

    @property
    def status(self) -> str:
        return str(self.summary.get("status"))


def run(path: Path) -> RunFiles | None:
    """A run folder's files, or None where it holds no summary.json or a damaged one (the index lists
    those as unreadable)."""
    summary = summary_or_none(path)
    if summary is None:
        return None
    rd = RunDir(path)
    memory = objects(json_object(rd.memory), "categories", "peak", "unattributed")
    if isinstance(memory.get("categories"), dict):
        memory["categories"] = {k: v for k, v in memory["categories"].items() if isinstance(v, dict)}
    return RunFiles(
        path=Path(path),
        summary=summary,
        env=objects(json_object(rd.env), "framework", "cpu", "gpu"),
        spec=json_object(rd.spec),
        memory=memory or None,
        kernels=kernels(rd.kernels),
    )


def finished(results: Path, statuses: tuple[str, ...] = MEASURED) -> list[tuple[dict[str, Any], RunFiles]]:
    """Every run of a results folder's index whose status is one of `statuses`, with its files read:
    (index row, files), in run-id order. Each run is read at the path the index gives (the results
    folder as given, joined once with the run's folder name), so a relative results folder reads its
    own runs and never results/results/<id>."""
    index = Index(results)
    out = []
    for status in statuses:
        for row in index.runs(status=status):
            found = run(Path(row["path"]))
            if found is not None:
                out.append((row, found))
    return sorted(out, key=lambda pair: pair[0]["run_id"])


def bundled(members: Mapping[str, bytes], prefix: str = "results") -> list[tuple[str, RunFiles | None, str | None]]:
    """The top-level runs among a bundle's members (`<prefix>/<run-id>/summary.json`), in run-id order:
    (run id, its files, None), or (run id, None, why) where its summary is not one a kit writes."""
    out: list[tuple[str, RunFiles | None, str | None]] = []
    for name in sorted(members):
        parts = PurePosixPath(name).parts
        if len(parts) != 3 or parts[0] != prefix or parts[2] != files.SUMMARY:
            continue
        run_id = parts[1]
        try:
            summary = summaries.parse(members[name], run_id)
        except summaries.Unreadable as exc:
            out.append((run_id, None, exc.why))
            continue

        def member(file: str, run_id: str = run_id) -> dict[str, Any]:
            return json_of(members.get(f"{prefix}/{run_id}/{file}", b"{}")) or {}

        out.append(
            (run_id, RunFiles(Path(prefix, run_id), summary, env=member(files.ENV), spec=member(files.SPEC)), None)
        )
    return out


# ---------------------------------------------------------------- what a run ran on


def _nvml_name(env: dict[str, Any]) -> str | None:
    """The GPU's product name as NVML gives it (the same string whatever the framework): the
    device whose UUID the framework reported, else the only model the machine holds."""
    gpu, framework = env.get("gpu"), env.get("framework")
    listed = gpu.get("devices") if isinstance(gpu, dict) else None
    devices = [d for d in (listed if isinstance(listed, list) else []) if isinstance(d, dict) and d.get("name")]
    props = framework.get("device_properties") if isinstance(framework, dict) else None
    uuid = str((props if isinstance(props, dict) else {}).get("uuid") or "")
    for d in devices:
        if uuid and str(d.get("uuid", "")).removeprefix("GPU-").removeprefix("MIG-") == uuid.removeprefix("GPU-"):
            return str(d["name"])
    names = {str(d["name"]) for d in devices}
    return names.pop() if len(names) == 1 else None


def _part(env: dict[str, Any], key: str) -> dict[str, Any]:
    value = env.get(key)
    return value if isinstance(value, dict) else {}


def device_name(summary: dict[str, Any], env: dict[str, Any]) -> str:
    """What the run ran on, as a person would name it: the GPU's product name (NVML's, so that
    MXNet's "gpu(0)" and PyTorch's name of one GPU are the same device), or the CPU's model."""
    framework, gpu, cpu = (_part(env, k) for k in ("framework", "gpu", "cpu"))
    if str(summary.get("device", "")).startswith("cuda"):
        named = framework.get("device_name")
        if not named or str(named).startswith("gpu("):
            named = None
        return str(_nvml_name(env) or named or gpu.get("name") or summary.get("device"))
    return f"CPU: {cpu.get('model') or 'unknown'} ({cpu.get('logical_cores', '?')} cores)"
