"""The runs a report shows: index rows joined with what each run directory holds.

The report reads only results (the house rule): the SQLite index for the list of runs and the
sweeps' instability flags, each run's summary.json/env.json/spec.json, and memory.json or
kernels.csv where the run wrote them. Nothing here imports a framework or a launcher.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tbdkit.results import summary as summaries
from tbdkit.store import Index

# Model families the paper's observations talk about.
RNN_MODELS = frozenset({"deepspeech2", "seq2seq"})
LSTM_MODELS = frozenset({"seq2seq"})
CNN_MODELS = frozenset({"resnet50", "inception_v3", "faster_rcnn", "mask_rcnn", "efficientdet", "wgan_gp"})
MEMORY_CATEGORIES = ("weights", "weight_gradients", "feature_maps", "workspace", "dynamic")


@dataclass
class Run:
    """One finished run, flattened for figures, tables and claims."""
    run_id: str
    path: Path
    model: str
    framework: str
    batch_size: int
    precision: str
    device: str
    device_name: str
    summary: dict[str, Any]
    env: dict[str, Any]
    spec: dict[str, Any]
    memory: dict[str, Any] | None = None
    kernels: list[dict[str, Any]] = field(default_factory=list)
    unstable: bool = False
    unstable_reason: str | None = None

    def metric(self, name: str) -> float | None:
        value = ((self.summary.get("metrics") or {}).get(name) or {}).get("value")
        return float(value) if isinstance(value, (int, float)) else None

    def metric_entry(self, name: str) -> dict[str, Any]:
        return (self.summary.get("metrics") or {}).get(name) or {}

    @property
    def unit(self) -> str:
        return self.metric_entry("throughput").get("unit") or ""

    @property
    def ci95_half_width(self) -> float | None:
        value = self.metric_entry("throughput").get("ci95_half_width")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def world_size(self) -> int:
        return int(self.summary.get("world_size") or self.spec.get("world_size") or 1)

    @property
    def nodes(self) -> int:
        return int(self.summary.get("nodes") or self.spec.get("nodes") or 1)

    @property
    def link_rate(self) -> str | None:
        return self.summary.get("link_rate") or self.spec.get("link_rate")

    def memory_bytes(self, category: str) -> int | None:
        entry = ((self.memory or {}).get("categories") or {}).get(category) or {}
        value = entry.get("bytes")
        return int(value) if isinstance(value, (int, float)) else None

    @property
    def series(self) -> tuple[str, str, str, str]:
        """Runs that differ only in batch size: one line in a figure."""
        return (self.model, self.framework, self.precision, self.device_name)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):  # missing, unreadable, not JSON, not text
        return {}
    return data if isinstance(data, dict) else {}


def _objects(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """`data` with each of `keys` that is not an object (damaged file) left out: read as not measured."""
    return {k: v for k, v in data.items() if k not in keys or isinstance(v, dict)}


def _number(text: str | None) -> float | None:
    try:
        return float(text.strip()) if isinstance(text, str) and text.strip() else None
    except ValueError:
        return None


def _kernels(path: Path) -> list[dict[str, Any]]:
    """kernels.csv's rows; a damaged file or cell is read as not measured."""
    if not path.is_file():
        return []
    rows = []
    try:
        with path.open(newline="", errors="replace") as fh:
            for row in csv.DictReader(fh):
                parsed: dict[str, Any] = {"kernel": str(row.get("kernel") or ""), "method": str(row.get("method") or "")}
                for key in ("calls", "total_time_us", "time_share", "mean_time_us", "fp32_utilization",
                            "tensor_utilization"):
                    parsed[key] = _number(row.get(key))
                rows.append(parsed)
    except (OSError, csv.Error):
        return []
    return rows


def device_name(summary: dict[str, Any], env: dict[str, Any]) -> str:
    """What the run ran on, as a person would name it: the GPU's name, or the CPU's model."""
    framework = env.get("framework") or {}
    if str(summary.get("device", "")).startswith("cuda"):
        return str(framework.get("device_name") or (env.get("gpu") or {}).get("name") or summary.get("device"))
    cpu = env.get("cpu") or {}
    return f"CPU: {cpu.get('model') or 'unknown'} ({cpu.get('logical_cores', '?')} cores)"


def from_dir(path: Path, run_id: str | None = None, flag: dict[str, Any] | None = None) -> Run | None:
    """One run directory as a Run, or None where it holds no summary.json or a damaged one (the
    index lists those as unreadable)."""
    try:
        summary = summaries.read(path)
    except (OSError, summaries.Unreadable):
        return None
    env = _objects(_json(path / "env.json"), "framework", "cpu", "gpu")
    memory = _objects(_json(path / "memory.json"), "categories", "peak", "unattributed")
    if isinstance(memory.get("categories"), dict):
        memory["categories"] = {k: v for k, v in memory["categories"].items() if isinstance(v, dict)}
    return Run(
        run_id=run_id or str(summary.get("run_id") or path.name), path=path, model=str(summary.get("model")),
        framework=str(summary.get("framework")), batch_size=int(summary.get("batch_size") or 0),
        precision=str(summary.get("precision")), device=str(summary.get("device")),
        device_name=device_name(summary, env), summary=summary, env=env, spec=_json(path / "spec.json"),
        memory=memory or None, kernels=_kernels(path / "kernels.csv"),
        unstable=bool(flag) or bool(summary.get("unstable")),
        unstable_reason=(flag or {}).get("unstable_reason") or summary.get("instability_reason"),
    )


def _oldest_first(runs: list[Run]) -> list[Run]:
    return sorted(runs, key=lambda r: (r.summary.get("started_utc") or "", r.run_id))


def load(results: Path) -> list[Run]:
    """Every run of the index that finished ok, oldest first."""
    index = Index(results)
    unstable = {p["run_id"]: p for p in index.sweep_points() if p.get("unstable")}
    runs = []
    for row in index.runs(status="ok"):
        path = Path(row.get("path") or results / row["run_id"])
        if not path.is_absolute():
            path = results / path
        run = from_dir(path, row["run_id"], unstable.get(row["run_id"]))
        if run is not None:
            runs.append(run)
    return _oldest_first(runs)


def load_dirs(dirs: list[Path]) -> list[Run]:
    """Runs straight from their directories (no index): the committed reference results."""
    runs = [r for r in (from_dir(d) for d in dirs) if r is not None and r.summary.get("status") == "ok"]
    return _oldest_first(runs)


def by_series(runs: list[Run]) -> dict[tuple[str, str, str, str], list[Run]]:
    """Runs grouped into lines (model, framework, precision, device), single-worker only, by batch."""
    groups: dict[tuple[str, str, str, str], list[Run]] = {}
    for r in runs:
        if r.world_size == 1:
            groups.setdefault(r.series, []).append(r)
    return {k: sorted(v, key=lambda r: r.batch_size) for k, v in sorted(groups.items())}


def mean_by_batch(runs: list[Run], value: Any) -> list[tuple[int, float, float, bool]]:
    """(batch, mean, spread, any unstable) per batch size of one series; repeats are averaged and
    their standard deviation is the spread (a single run's spread is its 95% CI half-width)."""
    out = []
    for batch in sorted({r.batch_size for r in runs}):
        same = [r for r in runs if r.batch_size == batch]
        vals = [v for v in (value(r) for r in same) if v is not None]
        if not vals:
            continue
        mean = sum(vals) / len(vals)
        if len(vals) > 1:
            spread = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5
        else:
            spread = (same[0].ci95_half_width or 0.0) if value is throughput else 0.0
        out.append((batch, mean, spread, any(r.unstable for r in same)))
    return out


def throughput(run: Run) -> float | None:
    return run.metric("throughput")
