"""Two sides' throughput compared with a verdict: faster, slower, or the same within noise.

A side is one run, or several runs of one spec (repeats). The verdict's interval must hold the
noise that separates two runs of one spec, and most of that is run to run: on the kit's 2-core
development machine, 5 of 16 pairs of single CPU runs of one spec (Deep Speech 2, batch 2) were
called different by an interval built from each run's iterations alone, with every iteration of one
run slower than the other's (a process's placement, memory layout and the machine's state differ
from run to run; Mytkowicz et al., ASPLOS 2009). Hence two methods:

- Between runs (three runs or more in all): the ratio of the sides' geometric-mean throughputs,
  its interval Student's t on the runs' log throughputs: Welch's, with Welch-Satterthwaite's degrees
  of freedom, when each side has two runs or more; with one run on a side (a reference), that run
  taken to vary as much as the other side's runs do. Run-to-run variation is in the interval.
- Within one run each (one run a side): the ratio of the two windows' throughputs (each the sum of
  work / sum of iteration times, tbdkit.core.statistics), its interval the delta method's: on the log
  scale the two runs' relative standard errors add in quadrature, with the conservative degrees of
  freedom min(dof_A, dof_B); from each run's iterations.csv, or, for a run folder without it (an
  older reference), from the standard error its summary records. Run-to-run variation is not in
  it, and the verdict says so. A run whose window has one iteration has no noise of its own: it
  gives no verdict one run a side, and takes part between runs like any other.

A side is read through tbdkit.results.readers: a summary or window iteration that is not a finite
positive number (zero, negative, NaN, infinite seconds, work or throughput) is unreadable, and no
verdict is given on it.

The verdict is "faster" or "slower" when the interval (95% unless asked) excludes 1, else "same
within noise"; beside it, the smallest difference the data could have detected (a two-sided test at
the same level with 80% power).

Only like runs are compared: the same model, framework, preset, variant, data, precision, device
kind, GPU product, network (nodes, workers, link) and lock where recorded; the batch size and the
graph (standard or compiled) may differ between the sides (those are questions the comparison
answers), never within one. `force` compares
unlike sides and lists every difference, the environments' included (versions, driver, clocks).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist, fmean
from typing import Any

from tbdkit.core.errors import UserError
from tbdkit.core.statistics import ratio_estimate, t_quantile
from tbdkit.results import files as runfiles
from tbdkit.results import readers
from tbdkit.results import summary as summaries
from tbdkit.results.summary import MEASURED

FASTER, SLOWER, SAME = "faster", "slower", "same within noise"
POWER = 0.80
LEVEL = 0.95
BETWEEN, WITHIN = "between runs", "within one run each"
LEVEL_RANGE = (0.5, 0.9999)  # beyond 99.99% a t quantile of few dof gives no finite interval worth printing
MAX_LOG_SPREAD = 700.0  # exp() of more overflows a float: the interval has no finite bounds
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
# may differ: the comparison is about them (compiled against standard graphs: what compilation buys)
ALLOWED_FIELDS = ("batch_size", "graph")


@dataclass
class Side:
    """One run as compared: its identity and its throughput's estimate and standard error."""

    path: Path
    summary: dict[str, Any]
    spec: dict[str, Any]
    env: dict[str, Any]
    throughput: float
    se: float | None  # standard error of the throughput, same unit; None when unknown (one window iteration)
    dof: int  # degrees of freedom of that error (the effective iterations - 1: tbdkit.core.statistics.RunningRatio)
    unit: str
    source: str  # where the estimate comes from (iterations.csv or the summary)

    @property
    def label(self) -> str:
        s = self.summary
        graph = " compiled" if self.field("graph") == "compiled" else ""
        return f"{s.get('model')}/{s.get('framework')} b{s.get('batch_size')} {s.get('precision')}{graph} ({self.path.name})"

    @property
    def relative_se(self) -> float | None:
        return self.se / self.throughput if self.se is not None and self.throughput > 0 else None

    @property
    def ci95_relative(self) -> float | None:
        """The run's own 95% half-width, relative (t quantile of its degrees of freedom); None when unknown."""
        rel = self.relative_se
        return None if rel is None else t_quantile(0.975, self.dof) * rel

    def field(self, name: str) -> Any:
        value = self.summary.get(name)
        value = self.spec.get(name) if value is None else value
        return "standard" if name == "graph" and value is None else value  # before compiled runs: standard

    @property
    def device_kind(self) -> str:
        return "cuda" if str(self.summary.get("device") or "").startswith("cuda") else "cpu"

    @property
    def gpu_product(self) -> str | None:
        return readers.device_name(self.summary, self.env) if self.device_kind == "cuda" else None


def load(run_dir: Path) -> Side:
    """A finished run folder as one side of a comparison; UserError when it cannot be one. A run whose
    window has one iteration is a side whose own noise is unknown (`se` None): it takes part in a
    between-runs comparison, which does not use it, never in one run a side."""
    run_dir = Path(run_dir)
    try:
        summary = summaries.read(run_dir)
    except FileNotFoundError:
        raise UserError(
            f"{run_dir} holds no {runfiles.SUMMARY}: pass a finished run's folder or id (`tbdkit runs` lists them)."
        ) from None
    except summaries.Unreadable as exc:
        raise UserError(f"{exc}: no verdict on it; compare another run.") from None
    if summary.get("status") not in MEASURED:
        raise UserError(
            f"{run_dir.name} ended {summary.get('status')!r}, not ok: only finished runs have a throughput to compare."
        )
    thr = (summary.get("metrics") or {}).get("throughput") or {}
    value = readers.finite(thr.get("value"))
    if value is None or value <= 0:
        raise UserError(
            f"{run_dir.name} records no throughput ({thr.get('reason') or 'a converge or profiled run'}): "
            "compare runs of the smoke or paper preset."
        )
    spec = readers.json_object(run_dir / runfiles.SPEC)
    env = readers.json_object(run_dir / runfiles.ENV)
    unit = str(thr.get("unit") or "")
    window = summary.get("window") or {}
    try:
        rows = readers.window(run_dir, window)
    except summaries.Unreadable as exc:
        raise UserError(f"{exc}: no verdict on damaged iterations; compare another run.") from None
    except OSError:  # none (an older reference): the summary's own CI is used instead
        rows = None
    if rows:
        est = ratio_estimate(rows.works, rows.seconds)
        n = est.iterations
        if not (math.isfinite(est.throughput) and est.throughput > 0 and (n < 2 or math.isfinite(est.half_width))):
            raise UserError(
                f"unreadable: {run_dir.name}: its window's {n} iterations give no finite throughput and interval "
                "(work or seconds beyond what a float holds): no verdict on it; compare another run."
            )
        return Side(
            run_dir,
            summary,
            spec,
            env,
            est.throughput,
            est.se,  # widened for the iterations' lag-1 autocorrelation, as the run's own interval is
            est.dof if est.se is not None else n - 1,
            unit,
            f"{runfiles.ITERATIONS}: {n} window iteration{'s' if n != 1 else ''}",
        )
    n = int(window.get("iterations") or 0)
    half = readers.finite(thr.get("ci95_half_width"))
    known = n >= 2 and half is not None and half >= 0
    recorded = thr.get("ci95_dof")  # the interval's own dof; before it was recorded, iterations - 1
    dof = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) and 1 <= recorded < n else n - 1
    return Side(
        run_dir,
        summary,
        spec,
        env,
        value,
        half / t_quantile(0.975, dof) if known and half is not None else None,
        max(dof, 0),
        unit,
        f"{runfiles.SUMMARY}"
        + (f"'s 95% CI over {n} window iterations" if known else f" ({n} window iteration(s), no recorded 95% CI)")
        + f" (no {runfiles.ITERATIONS})",
    )


def percent(level: float) -> str:
    """0.95 as '95%', 0.999 as '99.9%'."""
    return f"{100 * level:.10g}%"


def _paths(sides: Sequence[Side]) -> str:
    return ", ".join(side.path.name for side in sides)


@dataclass
class Comparison:
    a: list[Side]  # side A's runs (one, or repeats of one spec)
    b: list[Side]
    ratio: float  # A's throughput / B's (geometric means over each side's runs)
    low: float  # the interval of the ratio at `level`
    high: float
    verdict: str  # FASTER / SLOWER / SAME: A relative to B
    detectable: float  # smallest relative difference detectable (two-sided at `level`, 80% power)
    dof: int
    noise: str  # BETWEEN (the runs' spread) or WITHIN (each run's iterations)
    level: float = LEVEL
    unlike: list[tuple[str, Any, Any]] = field(default_factory=list)  # fields that must match and do not
    differences: list[tuple[str, Any, Any]] = field(default_factory=list)  # everything else that differs

    @property
    def throughput_a(self) -> float:
        return geometric_mean(self.a)

    @property
    def throughput_b(self) -> float:
        return geometric_mean(self.b)

    @property
    def method(self) -> str:
        detect = f"detectable: the difference a two-sided {percent(1 - self.level)} test finds with {POWER:.0%} power"
        if self.noise == BETWEEN:
            return (
                f"ratio of the sides' geometric-mean throughputs over {len(self.a)} and {len(self.b)} runs; "
                f"{percent(self.level)} interval: Student's t on the runs' log throughputs ("
                + (
                    "Welch's, Welch-Satterthwaite dof rounded down"
                    if min(len(self.a), len(self.b)) > 1
                    else "the single run's side taken to vary as the other side's runs do"
                )
                + f", dof {self.dof}): run-to-run variation is in it. {detect}. "
                f"A: {_paths(self.a)}; B: {_paths(self.b)}"
            )
        a, b = self.a[0], self.b[0]
        return (
            f"ratio of the two windows' throughputs (sum of work / sum of time); {percent(self.level)} interval by the "
            f"delta method on the log ratio, conservative dof min(dof_A, dof_B) = {self.dof}, from each run's "
            f"iterations: run-to-run variation is not in it. {detect}. A: {a.source}; B: {b.source}"
        )

    def disturbed(self) -> str:
        """'' or which side's runs ended `disturbed` (their numbers are kept, their noise may not be the machine's own)."""
        notes = []
        for name, sides in (("A", self.a), ("B", self.b)):
            for side in sides:
                if side.summary.get("status") == "disturbed":
                    who = f"{name} {side.path.name}" if len(sides) > 1 else name
                    why = "; ".join(side.summary.get("disturbed_reasons") or []) or "no reason recorded"
                    notes.append(f"{who} was disturbed ({why})")
        return "; ".join(notes)

    def caveat(self) -> str:
        """'' between runs; within one run each, that run-to-run variation is not in the interval, and the remedy."""
        if self.noise == BETWEEN:
            return ""
        return (
            "within one run each: the interval holds each window's iteration-to-iteration noise, not the run-to-run "
            "variation between two runs of one spec. For that, measure each side three times or more and pass every "
            "run (tbdkit compare A1 A2 A3 --against B1 --against B2 --against B3)"
        )

    def sentence(self) -> str:
        notes = [n for n in (self.caveat(), self.disturbed()) if n]
        return self._verdict() + "".join(f". Note: {n}" for n in notes)

    def _verdict(self) -> str:
        change = f"{self.ratio - 1:+.1%}"
        ci = f"{percent(self.level)} CI {self.low:.3f}-{self.high:.3f}"
        detect = f"the data could detect a difference of about {self.detectable:.1%}"
        if self.verdict == SAME:
            return f"same within noise: A/B = {self.ratio:.3f} ({change}, {ci}); {detect}"
        return f"A is {self.verdict} than B: A/B = {self.ratio:.3f} ({change}, {ci}); {detect}"

    def as_json(self) -> dict[str, Any]:
        return {
            "a": [str(side.path) for side in self.a],
            "b": [str(side.path) for side in self.b],
            "unit": self.a[0].unit,
            "throughput_a": self.throughput_a,
            "throughput_b": self.throughput_b,
            "ratio": round(self.ratio, 6),
            "level": self.level,
            "interval": [round(self.low, 6), round(self.high, 6)],
            "noise": self.noise,
            "verdict": self.verdict,
            "detectable_relative_difference": round(self.detectable, 6),
            "method": self.method,
            "caveat": self.caveat() or None,
            "unlike": [list(d) for d in self.unlike],
            "differences": [list(d) for d in self.differences],
        }


def geometric_mean(sides: Sequence[Side]) -> float:
    return math.exp(fmean(math.log(side.throughput) for side in sides))


def _interval(ratio: float, se: float, dof: int, level: float) -> tuple[float, float, float, int, float]:
    t = t_quantile(0.5 + level / 2, dof)
    widest = (t + NormalDist().inv_cdf(POWER)) * se  # the largest exponent below
    finite = math.isfinite(ratio) and ratio > 0 and math.isfinite(widest) and widest <= MAX_LOG_SPREAD
    bounds = (ratio * math.exp(-t * se), ratio * math.exp(t * se)) if finite else (math.nan, math.nan)
    if not all(math.isfinite(b) and b > 0 for b in bounds):
        raise UserError(
            f"At the {percent(level)} level the interval of the ratio {ratio:.3g} has no finite bounds (t = {t:.3g}, "
            f"standard error {se:.3g} on the log scale, {dof} dof): no verdict. Give a lower --level, or measure "
            "more iterations or runs."
        )
    return ratio, bounds[0], bounds[1], dof, math.exp(widest) - 1


def ratio_interval(
    a_rate: float,
    a_rel_se: float,
    a_dof: int,
    b_rate: float,
    b_rel_se: float,
    b_dof: int,
    level: float = LEVEL,
) -> tuple[float, float, float, int, float]:
    """(ratio, low, high, dof, detectable) of a_rate / b_rate from each rate's relative standard
    error: log-scale delta method, with the conservative degrees of freedom min(dof_a, dof_b) (Hsu's
    choice for Welch's problem). Welch-Satterthwaite's estimated dof made the 95% interval cover
    93.7% (8 iterations a run) to 94.4% (20) of constructed repeats; the smaller dof keeps it at 95%
    within the Monte Carlo error (docs/energy-and-cost.md)."""
    se = math.sqrt(a_rel_se**2 + b_rel_se**2)
    return _interval(a_rate / b_rate, se, max(min(a_dof, b_dof), 1), level)


def between_runs_interval(
    a_rates: Sequence[float], b_rates: Sequence[float], level: float = LEVEL
) -> tuple[float, float, float, int, float]:
    """(ratio, low, high, dof, detectable) of the geometric-mean throughputs a / b over several runs a
    side, by Student's t on the runs' log throughputs. Two runs or more on each side: Welch's interval,
    each side its own variance, with Welch-Satterthwaite's degrees of freedom rounded down. One run on a
    side: that run is taken to vary from run to run as much as the other side's runs do (their variance,
    nB - 1 dof), the case of one reference run against repeats. Needs three runs or more in all.
    Coverage measured in tests/test_compare.py."""
    la, lb = [math.log(x) for x in a_rates], [math.log(x) for x in b_rates]
    na, nb = len(la), len(lb)
    if na + nb < 3 or min(na, nb) < 1:
        raise ValueError("a between-runs interval needs three runs or more in all, one a side at least")
    ma, mb = fmean(la), fmean(lb)
    va = sum((y - ma) ** 2 for y in la) / (na - 1) if na > 1 else None
    vb = sum((y - mb) ** 2 for y in lb) / (nb - 1) if nb > 1 else None
    if va is not None and vb is not None:
        ea, eb = va / na, vb / nb
        se2 = ea + eb
        dof = math.floor(se2**2 / (ea**2 / (na - 1) + eb**2 / (nb - 1))) if se2 > 0 else na + nb - 2
        dof = max(dof, min(na, nb) - 1)
    else:
        var, dof = (va, na - 1) if va is not None else (vb, nb - 1)
        assert var is not None
        se2 = var * (1 / na + 1 / nb)
    return _interval(math.exp(ma - mb), math.sqrt(se2), dof, level)


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


def _repeats(name: str, sides: Sequence[Side]) -> list[Side]:
    """A side's runs, checked to be repeats of one spec (every identity field and the batch size alike)."""
    if not sides:
        raise UserError(f"Side {name} has no run: pass at least one run on each side.")
    first = sides[0]
    for other in sides[1:]:
        unlike, allowed = identity_differences(first, other)
        if unlike or allowed:
            listed = "; ".join(f"{field_name}: {va!r} vs {vb!r}" for field_name, va, vb in unlike + allowed)
            raise UserError(
                f"Side {name}'s runs {first.path.name} and {other.path.name} are not repeats of one spec ({listed}): "
                "pass runs of one spec on each side."
            )
    if len({side.path.resolve() for side in sides}) < len(sides):
        raise UserError(f"Side {name} names one run twice: each repeat must be its own run.")
    return list(sides)


def compare(
    a: Side | Sequence[Side], b: Side | Sequence[Side], force: bool = False, level: float = LEVEL
) -> Comparison:
    """Side A's throughput against side B's (a run, or repeats of one spec each); UserError for unlike
    sides unless `force`. Between runs when there are three runs or more in all, else within one run each."""
    if not LEVEL_RANGE[0] <= level <= LEVEL_RANGE[1]:
        raise UserError(
            f"The level {level:g} is not a confidence level the comparison gives: give one in "
            f"[{LEVEL_RANGE[0]:g}, {LEVEL_RANGE[1]:g}], e.g. 0.95 or 0.99."
        )
    sides_a = _repeats("A", [a] if isinstance(a, Side) else a)
    sides_b = _repeats("B", [b] if isinstance(b, Side) else b)
    if {s.path.resolve() for s in sides_a} & {s.path.resolve() for s in sides_b}:
        raise UserError("A run is on both sides: compare two different sets of runs.")
    first_a, first_b = sides_a[0], sides_b[0]
    unlike, allowed = identity_differences(first_a, first_b)
    if unlike and not force:
        listed = "; ".join(f"{name}: {va!r} vs {vb!r}" for name, va, vb in unlike)
        raise UserError(
            f"The runs are not alike ({listed}): their throughputs measure different things. "
            "Compare runs of the same spec, or pass --force to compare anyway and list every difference."
        )
    if first_a.unit != first_b.unit and not force:
        raise UserError(f"The runs' throughputs are in different units ({first_a.unit} vs {first_b.unit}).")
    if len(sides_a) + len(sides_b) >= 3:
        noise = BETWEEN
        ratio, low, high, dof, detectable = between_runs_interval(
            [s.throughput for s in sides_a], [s.throughput for s in sides_b], level
        )
    else:
        noise = WITHIN
        for name, side in (("A", first_a), ("B", first_b)):
            if side.relative_se is None:
                raise UserError(
                    f"{name} ({side.path.name}): {side.source}, so its own noise is unknown and one run a side "
                    "gives no verdict: pass three runs or more in all (repeats of each spec: their spread is the "
                    "noise), or measure at least 2 iterations a run (a longer --max-measure-s)."
                )
        assert first_a.relative_se is not None and first_b.relative_se is not None
        ratio, low, high, dof, detectable = ratio_interval(
            first_a.throughput,
            first_a.relative_se,
            first_a.dof,
            first_b.throughput,
            first_b.relative_se,
            first_b.dof,
            level,
        )
    verdict = FASTER if low > 1 else SLOWER if high < 1 else SAME
    differences = allowed + (environment_differences(first_a, first_b) if force else [])
    return Comparison(sides_a, sides_b, ratio, low, high, verdict, detectable, dof, noise, level, unlike, differences)


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
