"""Two runs' throughput compared with a verdict: faster, slower, or the same within noise.

The ratio is run A's throughput over run B's (each the window's sum of work / sum of iteration
times, tbdkit.agent.stats). Its 95% interval is the delta method's, as for one run: on the log
scale the two runs' relative standard errors add in quadrature, with the conservative degrees of
freedom min(dof_A, dof_B); from each run's iterations.csv (the sample window's rows), or, for a run folder without
it (an older reference), from the standard error its summary records. The verdict is "faster" or
"slower" when the interval excludes 1, else "same within noise"; beside it, the smallest
difference the data could have detected (a two-sided 5% test with 80% power).

Only like runs are compared: the same model, framework, preset, variant, data, precision, device
kind, GPU product, network (nodes, workers, link) and lock where recorded; the batch size may differ
(that is a question the comparison answers). `force` compares unlike runs and lists every
difference, the environments' included (versions, driver, clocks).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from tbdkit.agent.stats import ratio_estimate, t_quantile
from tbdkit.errors import UserError
from tbdkit.results import files as runfiles
from tbdkit.results import summary as summaries
from tbdkit.results.sink import read_json
from tbdkit.results.summary import MEASURED

FASTER, SLOWER, SAME = "faster", "slower", "same within noise"
POWER = 0.80
LEVEL = 0.95
# What must match for two throughputs to be comparable (summary fields, then spec.json's).
LIKE_FIELDS = (
    "model",
    "framework",
    "preset",
    "variant",
    "data",
    "precision",
    "nodes",
    "gpus_per_node",
    "link_rate",
    "one_process",
    "lock_digest",
)
ALLOWED_FIELDS = ("batch_size",)  # may differ: the comparison is about them


@dataclass
class Side:
    """One run as compared: its identity and its throughput's estimate and standard error."""

    path: Path
    summary: dict[str, Any]
    spec: dict[str, Any]
    env: dict[str, Any]
    throughput: float
    se: float  # standard error of the throughput, same unit
    dof: int  # degrees of freedom of that error (iterations - 1)
    unit: str
    source: str  # where the estimate comes from (iterations.csv or the summary)

    @property
    def label(self) -> str:
        s = self.summary
        return f"{s.get('model')}/{s.get('framework')} b{s.get('batch_size')} {s.get('precision')} ({self.path.name})"

    @property
    def relative_se(self) -> float:
        return self.se / self.throughput if self.throughput > 0 else math.inf

    @property
    def ci95_relative(self) -> float:
        """The run's own 95% half-width, relative (t quantile of its degrees of freedom)."""
        return t_quantile(0.975, self.dof) * self.relative_se

    def field(self, name: str) -> Any:
        value = self.summary.get(name)
        return self.spec.get(name) if value is None else value

    @property
    def device_kind(self) -> str:
        return "cuda" if str(self.summary.get("device") or "").startswith("cuda") else "cpu"

    @property
    def gpu_product(self) -> str | None:
        if self.device_kind != "cuda":
            return None
        from tbdkit.report.runs import device_name

        return device_name(self.summary, self.env)


def window_rows(run_dir: Path, window: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    """Work and seconds of the sample window's iterations (iterations.csv's rows first_iteration ..
    last_iteration, phase 'measure')."""
    first, last = window.get("first_iteration"), window.get("last_iteration")
    works, times = [], []
    with (run_dir / runfiles.ITERATIONS).open(newline="") as fh:
        for row in csv.DictReader(fh):
            try:
                i = int(row["iteration"])
                if (
                    row.get("phase") != "measure"
                    or (first is not None and i < first)
                    or (last is not None and i > last)
                ):
                    continue
                works.append(float(row["work"]))
                times.append(float(row["seconds"]))
            except (KeyError, TypeError, ValueError):
                continue
    return works, times


def load(run_dir: Path) -> Side:
    """A finished run folder as one side of a comparison; UserError when it cannot be one."""
    run_dir = Path(run_dir)
    try:
        summary = summaries.read(run_dir)
    except FileNotFoundError:
        raise UserError(
            f"{run_dir} holds no {runfiles.SUMMARY}: pass a finished run's folder or id (`tbdkit runs` lists them)."
        ) from None
    except summaries.Unreadable as exc:
        raise UserError(f"{exc}: compare another run.") from None
    if summary.get("status") not in MEASURED:
        raise UserError(
            f"{run_dir.name} ended {summary.get('status')!r}, not ok: only finished runs have a throughput to compare."
        )
    thr = (summary.get("metrics") or {}).get("throughput") or {}
    if not isinstance(thr.get("value"), (int, float)):
        raise UserError(
            f"{run_dir.name} records no throughput ({thr.get('reason') or 'a converge or profiled run'}): "
            "compare runs of the smoke or paper preset."
        )
    spec = _object(run_dir / runfiles.SPEC)
    env = _object(run_dir / runfiles.ENV)
    unit = str(thr.get("unit") or "")
    window = summary.get("window") or {}
    try:
        works, times = window_rows(run_dir, window)
    except (OSError, csv.Error, ValueError):  # none, or damaged: the summary's own CI is used instead
        works, times = [], []
    if len(works) >= 2:
        est = ratio_estimate(works, times)
        se = est.half_width / t_quantile(0.975, est.iterations - 1)
        return Side(
            run_dir,
            summary,
            spec,
            env,
            est.throughput,
            se,
            est.iterations - 1,
            unit,
            f"{runfiles.ITERATIONS}: {est.iterations} window iterations",
        )
    n = int(window.get("iterations") or 0)
    half = thr.get("ci95_half_width")
    if n < 2 or not isinstance(half, (int, float)):
        why = (
            f"its sample window has {max(n, len(works))} iteration(s)"
            if max(n, len(works)) < 2
            else f"it has neither the window's {runfiles.ITERATIONS} nor a recorded 95% CI"
        )
        raise UserError(
            f"{run_dir.name}: {why}, so its throughput's noise is unknown and no verdict can be given: "
            "measure at least 2 iterations (a longer --max-measure-s)."
        )
    return Side(
        run_dir,
        summary,
        spec,
        env,
        float(thr["value"]),
        float(half) / t_quantile(0.975, n - 1),
        n - 1,
        unit,
        f"{runfiles.SUMMARY}'s 95% CI over {n} window iterations (no {runfiles.ITERATIONS})",
    )


def _object(path: Path) -> dict[str, Any]:
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass
class Comparison:
    a: Side
    b: Side
    ratio: float  # a's throughput / b's
    low: float  # 95% interval of the ratio
    high: float
    verdict: str  # FASTER / SLOWER / SAME: a relative to b
    detectable: float  # smallest relative difference detectable (5% two-sided, 80% power)
    dof: int
    unlike: list[tuple[str, Any, Any]] = field(default_factory=list)  # fields that must match and do not
    differences: list[tuple[str, Any, Any]] = field(default_factory=list)  # everything else that differs

    @property
    def method(self) -> str:
        return (
            f"ratio of the two windows' throughputs (sum of work / sum of time); {LEVEL:.0%} interval by the "
            f"delta method on the log ratio, conservative dof min(dof_A, dof_B) = {self.dof}; detectable: the difference a "
            f"two-sided {1 - LEVEL:.0%} test finds with {POWER:.0%} power. A: {self.a.source}; B: {self.b.source}"
        )

    def disturbed(self) -> str:
        """'' or which side ended `disturbed` (its numbers are kept, its noise may not be the machine's own)."""
        notes = [
            f"{name} was disturbed ({'; '.join(side.summary.get('disturbed_reasons') or []) or 'no reason recorded'})"
            for name, side in (("A", self.a), ("B", self.b))
            if side.summary.get("status") == "disturbed"
        ]
        return "; ".join(notes)

    def sentence(self) -> str:
        return self._verdict() + (f". Note: {self.disturbed()}" if self.disturbed() else "")

    def _verdict(self) -> str:
        change = f"{self.ratio - 1:+.1%}"
        ci = f"95% CI {self.low:.3f}-{self.high:.3f}"
        detect = f"the data could detect a difference of about {self.detectable:.1%}"
        if self.verdict == SAME:
            return f"same within noise: A/B = {self.ratio:.3f} ({change}, {ci}); {detect}"
        return f"A is {self.verdict} than B: A/B = {self.ratio:.3f} ({change}, {ci}); {detect}"

    def as_json(self) -> dict[str, Any]:
        return {
            "a": str(self.a.path),
            "b": str(self.b.path),
            "unit": self.a.unit,
            "throughput_a": self.a.throughput,
            "throughput_b": self.b.throughput,
            "ratio": round(self.ratio, 6),
            "ci95": [round(self.low, 6), round(self.high, 6)],
            "verdict": self.verdict,
            "detectable_relative_difference": round(self.detectable, 6),
            "method": self.method,
            "unlike": [list(d) for d in self.unlike],
            "differences": [list(d) for d in self.differences],
        }


def ratio_interval(
    a_rate: float, a_rel_se: float, a_dof: int, b_rate: float, b_rel_se: float, b_dof: int
) -> tuple[float, float, float, int, float]:
    """(ratio, low, high, dof, detectable) of a_rate / b_rate from each rate's relative standard
    error: log-scale delta method, with the conservative degrees of freedom min(dof_a, dof_b) (Hsu's
    choice for Welch's problem). Welch-Satterthwaite's estimated dof made the 95% interval cover
    93.7% (8 iterations a run) to 94.4% (20) of constructed repeats; the smaller dof keeps it at 95%
    within the Monte Carlo error (docs/energy-and-cost.md)."""
    va, vb = a_rel_se**2, b_rel_se**2
    se = math.sqrt(va + vb)
    dof = max(min(a_dof, b_dof), 1)
    t = t_quantile(0.5 + LEVEL / 2, dof)
    ratio = a_rate / b_rate
    low, high = ratio * math.exp(-t * se), ratio * math.exp(t * se)
    detectable = math.exp((t + NormalDist().inv_cdf(POWER)) * se) - 1
    return ratio, low, high, dof, detectable


def identity_differences(a: Side, b: Side) -> tuple[list[tuple[str, Any, Any]], list[tuple[str, Any, Any]]]:
    """(unlike, other): the identity fields that must match and do not; the allowed ones that differ."""
    unlike: list[tuple[str, Any, Any]] = []
    other: list[tuple[str, Any, Any]] = []
    for name in LIKE_FIELDS:
        va, vb = a.field(name), b.field(name)
        if va != vb and not (
            (name in ("nodes", "gpus_per_node") and (va or 1) == (vb or 1))
            or (name == "one_process" and bool(va) == bool(vb))  # unrecorded before it existed: one process each
        ):
            unlike.append((name, va, vb))
    for name, va, vb in (
        ("device", a.device_kind, b.device_kind),
        ("gpu_product", a.gpu_product, b.gpu_product),
        ("throughput_unit", a.unit, b.unit),
    ):
        if va != vb:
            unlike.append((name, va, vb))
    for name in ALLOWED_FIELDS:
        if a.field(name) != b.field(name):
            other.append((name, a.field(name), b.field(name)))
    return unlike, other


# env.json's parts that say nothing about the machine or software (where and when the run was).
ENV_SKIPPED = ("calibration.path", "calibration.time_utc", "kit.root")


def flatten(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        for i, v in enumerate(data):
            yield from flatten(v, f"{prefix}[{i}]")
    else:
        yield prefix, data


def environment_differences(a: Side, b: Side) -> list[tuple[str, Any, Any]]:
    """Every env.json value (versions, driver, clocks, packages, host...) that differs between the runs."""
    fa, fb = dict(flatten(a.env)), dict(flatten(b.env))
    return [
        (f"env.{k}", fa.get(k), fb.get(k))
        for k in sorted(set(fa) | set(fb))
        if fa.get(k) != fb.get(k) and not k.startswith(ENV_SKIPPED)
    ]


def compare(a: Side, b: Side, force: bool = False) -> Comparison:
    """A's throughput against B's; UserError for unlike runs unless `force`."""
    unlike, allowed = identity_differences(a, b)
    if unlike and not force:
        listed = "; ".join(f"{name}: {va!r} vs {vb!r}" for name, va, vb in unlike)
        raise UserError(
            f"The runs are not alike ({listed}): their throughputs measure different things. "
            "Compare runs of the same spec, or pass --force to compare anyway and list every difference."
        )
    if a.unit != b.unit and not force:
        raise UserError(f"The runs' throughputs are in different units ({a.unit} vs {b.unit}).")
    ratio, low, high, dof, detectable = ratio_interval(
        a.throughput, a.relative_se, a.dof, b.throughput, b.relative_se, b.dof
    )
    verdict = FASTER if low > 1 else SLOWER if high < 1 else SAME
    differences = allowed + (environment_differences(a, b) if force else [])
    return Comparison(a, b, ratio, low, high, verdict, detectable, dof, unlike, differences)


def reference_dirs(workloads: Path, model: str) -> list[Path]:
    """The committed reference run folders of a model: workloads/<model>/reference/<run>/."""
    return sorted(p.parent for p in (workloads / model / "reference").glob(f"*/{runfiles.SUMMARY}"))


def matching_reference(side: Side, workloads: Path) -> Side | None:
    """The committed reference for the same model, framework, preset, precision, GPU product and
    batch size; None if none is committed."""
    for path in reference_dirs(workloads, str(side.summary.get("model"))):
        try:
            ref = load(path)
        except UserError:
            continue
        unlike, allowed = identity_differences(side, ref)
        if not unlike and not allowed:
            return ref
    return None


def no_reference_sentence(side: Side, workloads: Path) -> str:
    s = side.summary
    where = side.gpu_product or "this CPU"
    return (
        f"No committed reference result for {s.get('model')}/{s.get('framework')} {s.get('preset')} "
        f"{s.get('precision')} batch {s.get('batch_size')} on {where}: {workloads / str(s.get('model')) / 'reference'} holds none yet "
        "(references are written on a GPU machine by `tbdkit reference`)."
    )
