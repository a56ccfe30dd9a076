"""The runs a report shows: index rows joined with what each run directory holds.

The report reads only results (the house rule): the SQLite index for the list of runs and the
sweeps' instability flags, each run's summary.json/env.json/spec.json, and memory.json or
kernels.csv where the run wrote them. Nothing here imports a framework or a launcher.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from tbdkit.analysis.peak import Device, peak_flops, product_of
from tbdkit.results import files as runfiles
from tbdkit.results import readers
from tbdkit.results.index import Index
from tbdkit.results.readers import device_name
from tbdkit.results.summary import MEASURED
from tbdkit.spec import catalog

MAX_BYTES = 2**64  # no device's memory holds more: a larger count in memory.json is no measurement


MAX_COUNT = 10**6  # workers, machines, a GPU's SMs: a run file's larger number is no count


def count(value: Any) -> int | None:
    """A run file's count of workers, machines or SMs (readers.count), else None."""
    return readers.count(value, MAX_COUNT)


def byte_count(value: Any) -> int | None:
    """A run file's count of bytes, or None where it is none: null, text, a negative number, NaN, infinity or a
    400-digit integer (a damaged or forged file)."""
    number = readers.finite(value)
    return int(number) if number is not None and 0 <= number <= MAX_BYTES else None


def layer_family(*kinds: str) -> frozenset[str]:
    """The models whose workload.toml names one of `kinds` as its dominant layer ("RNN" matches
    "RNN (GRU)"): the model families the paper's observations talk about."""
    return frozenset(m.name for m in catalog.models().values() if m.dominant_layer.split(" ")[0] in kinds)


def rnn_models() -> frozenset[str]:
    """The recurrent models (DeepSpeech2's GRUs, Seq2Seq's LSTMs) of the workloads folder in use; read when
    asked (the catalog keeps each folder's models), not at import, so a workloads folder the catalog refuses
    is the command's one sentence, not an import's traceback."""
    return layer_family("RNN", "LSTM")


def lstm_models() -> frozenset[str]:
    return layer_family("LSTM")


MEMORY_CATEGORIES = ("weights", "weight_gradients", "feature_maps", "workspace", "dynamic")
UNCALIBRATED = "uncalibrated"
MARKED_METRICS = (
    "throughput",
    "gpu_utilization",
    "fp32_utilization",
    "tensor_utilization",
    "cpu_utilization",
    "process_cpu_utilization",
    "peak_rss",
    "mfu",
)  # metrics the report shows
UNRECORDED = "unrecorded"  # a field an older run did not write: never assumed equal to a recorded value


class SeriesKey(NamedTuple):
    """Everything that changes the work a run measures, except the batch size: runs that share a
    key differ only in batch size (and repeat), so they are one line in a figure and one series in
    a claim. Runs whose keys differ are never averaged or compared as if they were alike."""

    model: str
    framework: str
    preset: str
    variant: str
    data: str
    precision: str
    device: str
    nodes: int
    gpus_per_node: int
    link_rate: str
    one_process: bool = False  # the node's replicas in one process (MirroredStrategy, MXNet's device kvstore)
    graph: str = "standard"  # standard, or compiled (torch.compile, XLA, MXNet's static shapes)

    def but(self, *fields: str) -> tuple:
        """The key without `fields`: what must match for runs compared across those fields."""
        return tuple(v for f, v in zip(self._fields, self) if f not in fields)

    @property
    def label(self) -> str:
        text = f"{self.model}/{self.framework}/{self.precision} [{self.preset}"
        text += "" if self.variant == "default" else f", variant {self.variant}"
        text += f", {self.data} data" + (f", {self.graph} graph" if self.graph != "standard" else "") + "]"
        text += f" on {self.device}"
        if self.nodes * self.gpus_per_node > 1:
            text += (
                f" x{self.nodes} node(s) x{self.gpus_per_node} "
                + ("replicas in one process" if self.one_process else "worker(s)")
                + (f", link {self.link_rate}" if self.link_rate else "")
            )
        return text


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
    disturbed_reasons: list[str] = field(default_factory=list)

    @property
    def disturbed(self) -> bool:
        """Finished, its numbers kept, but something else competed for its machine in the window."""
        return self.summary.get("status") == "disturbed"

    @property
    def graph(self) -> str:
        """How the step ran: standard or compiled; runs made before compiled runs existed were standard."""
        return str(self.summary.get("graph") or self.spec.get("graph") or "standard")

    def metric(self, name: str) -> float | None:
        value = ((self.summary.get("metrics") or {}).get(name) or {}).get("value")
        return readers.finite(value)

    def metric_entry(self, name: str) -> dict[str, Any]:
        return (self.summary.get("metrics") or {}).get(name) or {}

    def calibration(self, name: str) -> str:
        """The verdict `tbdkit calibrate` gave the instrument of metric `name` on this run's machine
        (env.json's calibration): trusted, off, unsupported, or uncalibrated (no calibration, or none
        of its probes covers this metric)."""
        cal = self.env.get("calibration")
        if not isinstance(cal, dict) or not cal.get("calibrated") or not isinstance(cal.get("verdicts"), dict):
            return UNCALIBRATED
        return str(cal["verdicts"].get(name) or UNCALIBRATED)

    def calibration_marks(self, names: tuple[str, ...] = MARKED_METRICS) -> dict[str, str]:
        """Each of `names` this run measured whose instrument is not trusted, with its verdict."""
        return {
            n: self.calibration(n) for n in names if self.metric(n) is not None and self.calibration(n) != "trusted"
        }

    @property
    def unit(self) -> str:
        return self.metric_entry("throughput").get("unit") or ""

    @property
    def ci95_half_width(self) -> float | None:
        return readers.non_negative(self.metric_entry("throughput").get("ci95_half_width"))  # below 0: no interval

    @property
    def world_size(self) -> int:
        return count(self.summary.get("world_size")) or count(self.spec.get("world_size")) or 1

    @property
    def nodes(self) -> int:
        return count(self.summary.get("nodes")) or count(self.spec.get("nodes")) or 1

    @property
    def link_rate(self) -> str | None:
        return self.summary.get("link_rate") or self.spec.get("link_rate")

    def memory_bytes(self, category: str) -> int | None:
        """One category's bytes in memory.json (None: not measured, or no count of bytes)."""
        entry = ((self.memory or {}).get("categories") or {}).get(category) or {}
        return byte_count(entry.get("bytes"))

    @property
    def peak_memory_bytes(self) -> int | None:
        """memory.json's peak (None: not measured, or no count of bytes)."""
        return byte_count(((self.memory or {}).get("peak") or {}).get("bytes"))

    @property
    def is_gpu(self) -> bool:
        return self.device.startswith("cuda")

    def _field(self, name: str) -> Any:
        value = self.summary.get(name)
        return self.spec.get(name) if value is None else value

    @property
    def gpus_per_node(self) -> int:
        return count(self._field("gpus_per_node")) or max(1, self.world_size // self.nodes)

    @property
    def series(self) -> SeriesKey:
        """Runs that differ only in batch size: one line in a figure (see SeriesKey)."""
        return SeriesKey(
            self.model,
            self.framework,
            str(self._field("preset") or UNRECORDED),
            str(self._field("variant") or "default"),
            str(self._field("data") or UNRECORDED),
            self.precision,
            self.device_name,
            self.nodes,
            self.gpus_per_node,
            str(self.link_rate or ""),
            bool(self._field("one_process")),
            str(self._field("graph") or "standard"),
        )

    def peak_flops(self) -> float | None:
        """The GPU's peak FLOP/s in this run's math mode, from tbdkit's peak table
        (tbdkit.analysis.peak): as the run recorded it beside its MFU, else computed from the
        device properties env.json holds; None where neither is on disk."""
        for value in (self.metric_entry("peak_flops").get("value"), self.metric_entry("mfu").get("peak_flops")):
            number = readers.finite(value)
            if number is not None and number > 0:
                return number
        mode = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp8": "fp8"}.get(self.precision, "amp")
        if self.is_gpu and product_of(self.device_name) is not None:  # a datasheet row needs no properties
            return peak_flops(Device(self.device_name, "", 0, 0.0, "datasheet"), mode)[0]
        props = (self.env.get("framework") or {}).get("device_properties") or {}
        clock, sms = readers.finite(props.get("max_sm_clock_mhz")), count(props.get("sm_count"))
        if not (self.is_gpu and props.get("compute_capability") and sms and clock and clock > 0):
            return None
        return peak_flops(Device(self.device_name, str(props["compute_capability"]), sms, clock, runfiles.ENV), mode)[0]


def from_files(files: readers.RunFiles, run_id: str | None = None, flag: dict[str, Any] | None = None) -> Run:
    """A run's files (tbdkit.results.readers) as the report's Run; `flag` the sweep's instability flag."""
    summary = files.summary
    return Run(
        run_id=run_id or files.run_id,
        path=files.path,
        model=str(summary.get("model")),
        framework=str(summary.get("framework")),
        batch_size=int(summary.get("batch_size") or 0),
        precision=str(summary.get("precision")),
        device=str(summary.get("device")),
        device_name=device_name(summary, files.env),
        summary=summary,
        env=files.env,
        spec=files.spec,
        memory=files.memory,
        kernels=files.kernels,
        unstable=bool(flag) or bool(summary.get("unstable")),
        unstable_reason=(flag or {}).get("unstable_reason") or summary.get("instability_reason"),
        disturbed_reasons=[str(x) for x in summary.get("disturbed_reasons") or []],
    )


def from_dir(path: Path, run_id: str | None = None, flag: dict[str, Any] | None = None) -> Run | None:
    """One run directory as a Run, or None where it holds no summary.json or a damaged one (the
    index lists those as unreadable)."""
    files = readers.run(path)
    return None if files is None else from_files(files, run_id, flag)


def _oldest_first(runs: list[Run]) -> list[Run]:
    return sorted(runs, key=lambda r: (r.summary.get("started_utc") or "", r.run_id))


def load(results: Path) -> list[Run]:
    """Every run of the index that finished with its numbers (ok or disturbed), oldest first."""
    unstable = {p["run_id"]: p for p in Index(results).sweep_points() if p.get("unstable")}
    runs = [from_files(files, row["run_id"], unstable.get(row["run_id"])) for row, files in readers.finished(results)]
    return _oldest_first(runs)


def for_claims(runs: list[Run], include_disturbed: bool = False) -> list[Run]:
    """The runs the paper's claims are checked on: disturbed runs are left out unless asked for."""
    return runs if include_disturbed else [r for r in runs if not r.disturbed]


def without_failed_metrics(runs: list[Run]) -> list[Run]:
    """The runs with every metric whose instrument failed calibration on their machine left out
    (read as not measured): what the claim checks see."""
    out = []
    for r in runs:
        metrics = r.summary.get("metrics") or {}
        failed = {n for n in metrics if r.calibration(n) == "off"}
        if failed:
            r = replace(r, summary={**r.summary, "metrics": {n: m for n, m in metrics.items() if n not in failed}})
        out.append(r)
    return out


def load_dirs(dirs: list[Path]) -> list[Run]:
    """Runs straight from their directories (no index): the committed reference results."""
    runs = [r for r in (from_dir(d) for d in dirs) if r is not None and r.summary.get("status") in MEASURED]
    return _oldest_first(runs)


def by_series(runs: list[Run], multi_worker: bool = False) -> dict[SeriesKey, list[Run]]:
    """Runs grouped into lines by SeriesKey (single-worker only unless asked), each by batch."""
    groups: dict[SeriesKey, list[Run]] = {}
    for r in runs:
        if multi_worker or r.world_size == 1:
            groups.setdefault(r.series, []).append(r)
    return {k: sorted(v, key=lambda r: r.batch_size) for k, v in sorted(groups.items())}


@dataclass
class Grouping:
    """How the report grouped the runs: the number of series and, for each model and framework
    whose runs fell into more than one series, the fields that kept them apart."""

    runs: int
    groups: int
    kept_apart: list[str]

    @property
    def text(self) -> str:
        head = f"{self.runs} run(s) in {self.groups} group(s) of like runs (same {', '.join(_KEY_WORDS)}; only the batch size varies within one)"
        return head + (". Kept apart: " + "; ".join(self.kept_apart) + "." if self.kept_apart else ".")


_KEY_WORDS = (
    "model",
    "framework",
    "preset",
    "variant",
    "data source",
    "precision",
    "device",
    "nodes",
    "workers per node",
    "link",
    "one process",
    "graph",
)


def grouping(runs: list[Run]) -> Grouping:
    keys = {r.series for r in runs}
    by_pair: dict[tuple[str, str], list[SeriesKey]] = {}
    for k in keys:
        by_pair.setdefault((k.model, k.framework), []).append(k)
    apart = []
    for (model, framework), ks in sorted(by_pair.items()):
        if len(ks) < 2:
            continue
        why = []
        for i in range(2, len(SeriesKey._fields)):
            values = sorted({str(k[i]) or "none" for k in ks})
            if len(values) > 1:
                why.append(f"{_KEY_WORDS[i]} ({', '.join(values)})")
        apart.append(f"{model}/{framework} into {len(ks)} groups by {' and '.join(why)}")
    return Grouping(len(runs), len(keys), apart)


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


def noise_unknown(runs: list[Run]) -> bool:
    """Whether a point of a throughput line has no spread to draw: one run, whose window gave no 95% CI
    (a window of one iteration)."""
    return len(runs) == 1 and runs[0].ci95_half_width is None


def throughput(run: Run) -> float | None:
    return run.metric("throughput")
