"""The paper's twelve observations, each checked against the runs present.

Every check is a plain function over the runs (in the manner of Holistic Trace Analysis) that
returns a verdict — holds, does not hold, not enough data, or needs GPU runs — with the rule it
applied and the numbers that decided it. Beside each check: the paper's sentence it tests and
the rule. The observations are about GPU training, so every check is decided from GPU runs only
(CPU runs are set aside and named), and only like runs are compared (runs.SeriesKey: the same
model, framework, preset, variant, data source, precision, device and worker layout), except in
the one field an observation compares across (framework, device, link or worker count).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib  # novermin
except ModuleNotFoundError:  # Python 3.10 (the MXNet image): tomli is the same parser
    import tomli as tomllib  # type: ignore[no-redef]

from tbdkit.report.runs import (
    MEMORY_CATEGORIES,
    Run,
    SeriesKey,
    by_series,
    lstm_models,
    mean_by_batch,
    rnn_models,
    throughput,
    without_failed_metrics,
)

HOLDS, FAILS, NO_DATA, NEEDS_GPU = "holds", "does not hold", "not enough data", "needs GPU runs"
UNDECIDED = (NO_DATA, NEEDS_GPU)
# A difference counts (a drop, a lead, a gain) only beyond max(TOLERANCE of the larger value, the larger of the
# two points' spreads): the spread is the standard deviation of repeats, or a single run's 95% CI half-width.
TOLERANCE = 0.02


@dataclass
class Verdict:
    n: int
    claim: str
    verdict: str
    rule: str
    evidence: list[str] = field(default_factory=list)
    note: str | None = None  # what a reader must know to read the verdict (e.g. what the runs measure by design)


REFERENCE = Path(__file__).with_name("tbd-paper.toml")  # the paper's data, shipped with the kit


def reference() -> dict:
    return tomllib.loads(REFERENCE.read_text())


def reference_observations() -> dict[int, str]:
    return {int(o["n"]): str(o["claim"]) for o in reference().get("observation", [])}


# The paper's observations (TBD, Sec. IV), as the reference file states them; used when it is absent.
OBSERVATIONS = {
    1: "throughput increases with mini-batch size for all models",
    2: "RNN models (NMT, Deep Speech 2) do not saturate throughput within GPU memory; DS2 scales almost linearly",
    3: "framework ranking differs by application (MXNet faster on CNNs, TensorFlow faster on NMT)",
    4: "larger mini-batches raise GPU compute utilization",
    5: "LSTM models have low GPU compute utilization even at max batch; Transformer does not",
    6: "larger mini-batches raise FP32 utilization",
    7: "RNN models have much lower FP32 utilization than non-RNN models",
    8: "long-running kernels with low FP32 utilization exist even in optimized CNNs (batch norm, activations)",
    9: "a faster GPU raises throughput but its GPU and FP32 utilization are lower",
    10: "feature maps dominate memory (62% DS2 to 89% ResNet-50/Sockeye)",
    11: "feature-map memory grows almost linearly with mini-batch size",
    12: "multi-machine scaling needs network bandwidth: 1 Gbps degrades 2-machine throughput; multi-GPU over PCIe scales well",
}


def _decide(
    n: int, rule: str, verdicts: list[bool], evidence: list[str], no_data: list[str], note: str | None = None
) -> Verdict:
    """The verdict from per-series checks: not enough data when none could be checked, else holds
    only when every one holds."""
    if not verdicts:
        return Verdict(n, OBSERVATIONS[n], NO_DATA, rule, evidence + no_data, note)
    return Verdict(n, OBSERVATIONS[n], HOLDS if all(verdicts) else FAILS, rule, evidence, note)


def on_gpu_runs(check: Callable[[list[Run]], Verdict]) -> Callable[[list[Run]], Verdict]:
    """Decide `check` from GPU runs only: the paper's observations are about GPU training (its
    throughput, utilization and memory). CPU runs are set aside and counted in the evidence; on
    CPU-only results the verdict is 'needs GPU runs'."""

    @functools.wraps(check)
    def decided_on_gpus(runs: list[Run]) -> Verdict:
        gpu = [r for r in runs if r.is_gpu]
        cpu = len(runs) - len(gpu)
        v = check(gpu)
        if runs and not gpu:
            return Verdict(
                v.n,
                v.claim,
                NEEDS_GPU,
                v.rule,
                [
                    f"needs GPU runs: these results hold {cpu} run(s), none on a GPU, and the paper's "
                    "observations are about GPU training"
                ],
                v.note,
            )
        if cpu:
            v.evidence.append(f"{cpu} CPU run(s) set aside: the paper's observations are about GPU training")
        return v

    return decided_on_gpus


def _name(s: SeriesKey) -> str:
    return s.label


def _beyond_noise(hi: float, hi_spread: float, lo: float, lo_spread: float) -> bool:
    """hi exceeds lo by more than max(TOLERANCE of hi, the larger spread)."""
    return hi - lo > max(TOLERANCE * abs(hi), hi_spread, lo_spread)


def _rises_with_batch(runs: list[Run], metric: str | None, n: int, what: str) -> Verdict:
    """Shared rule of observations 1, 4 and 6: over each series with two or more batch sizes, the
    value at the largest batch exceeds the value at the smallest, and no step down is larger than
    the noise (noise: max(2% of the larger value, the larger of the two points' spreads) — the
    larger of the two, never their sum)."""
    value = throughput if metric is None else (lambda r: r.metric(metric))
    rule = (
        f"every series of like runs (SeriesKey) with >= 2 batch sizes: {what} at the largest batch exceeds that at "
        f"the smallest, and no step down beyond max({TOLERANCE:.0%}, the points' spread: std of repeats or the run's "
        "95% CI)"
    )
    evidence, verdicts = [], []
    for s, rs in by_series(runs).items():
        pts = mean_by_batch(rs, value)
        if len(pts) < 2:
            continue
        drops = [(a, b) for a, b in zip(pts, pts[1:]) if _beyond_noise(a[1], a[2], b[1], b[2])]
        ok = pts[-1][1] > pts[0][1] and not drops
        verdicts.append(ok)
        steps = ", ".join(f"b{b}: {v:,.3g}" for b, v, _, _ in pts)
        evidence.append(
            f"{'✓' if ok else '✗'} {_name(s)}: {steps}" + (f" (drop after b{drops[0][0][0]})" if drops else "")
        )
    return _decide(
        n,
        rule,
        verdicts,
        evidence,
        [f"no series has {what} at two or more batch sizes" + (f" ({_reasons(runs, metric)})" if metric else "")],
    )


def _reasons(runs: list[Run], metric: str) -> str:
    reasons = sorted({r.metric_entry(metric).get("reason") or "not recorded" for r in runs})
    return "; ".join(reasons[:2]) or "no runs"


@on_gpu_runs
def obs1_throughput_rises(runs: list[Run]) -> Verdict:
    """Paper (Obs. 1): "throughput increases with mini-batch size for all models".
    Rule: _rises_with_batch on throughput, tolerance max(2%, the points' spread)."""
    return _rises_with_batch(runs, None, 1, "throughput")


@on_gpu_runs
def obs2_rnn_no_saturation(runs: list[Run]) -> Verdict:
    """Paper (Obs. 2): "RNN models (NMT, Deep Speech 2) do not saturate throughput within GPU
    memory; DS2 scales almost linearly". Rule: each RNN series' last batch doubling still gains
    >= 10%; Deep Speech 2's throughput ~ batch^k with k >= 0.8."""
    rule = (
        "RNN models (deepspeech2, seq2seq), each series of like runs: the last batch doubling still gains >= 10% "
        "throughput (no saturation); Deep Speech 2 'almost linear': throughput ~ batch^k with k >= 0.8 between its "
        "smallest and largest batch"
    )
    evidence, verdicts = [], []
    for s, rs in by_series(runs).items():
        if s.model not in rnn_models():
            continue
        pts = mean_by_batch(rs, throughput)
        if len(pts) < 2:
            continue
        (b0, t0, _, _), (b1, t1, _, _) = pts[-2], pts[-1]
        gain_per_doubling = (t1 / t0) ** (1 / math.log2(b1 / b0)) - 1
        ok = gain_per_doubling >= 0.10
        line = f"{_name(s)}: last step b{b0}->b{b1} gains {gain_per_doubling:+.1%} per doubling"
        if s.model == "deepspeech2":
            k = math.log(pts[-1][1] / pts[0][1]) / math.log(pts[-1][0] / pts[0][0])
            ok = ok and k >= 0.8
            line += f"; exponent k = {k:.2f} over b{pts[0][0]}..b{pts[-1][0]}"
        verdicts.append(ok)
        evidence.append(("✓ " if ok else "✗ ") + line)
    return _decide(2, rule, verdicts, evidence, ["no RNN model (deepspeech2, seq2seq) at two or more batch sizes"])


# The paper's direction (Sec. IV-B, Fig. 4): MXNet is faster on the CNNs, TensorFlow on NMT.
PAPER_FASTER = {"resnet50": "mxnet", "inception_v3": "mxnet", "seq2seq": "tensorflow"}
PAPER_CLASSES = {"resnet50": "CNN", "inception_v3": "CNN", "seq2seq": "NMT"}
OBS3_NOTE = (
    "Measured on equal networks by design: every framework here runs the same network with the same "
    "hyperparameters (MXNet's seq2seq is a rebuild of that network, not Sockeye), so the contrast is the "
    "frameworks' speed on one network; the paper compared TensorFlow's NMT with MXNet's Sockeye, two "
    "different implementations, which is a different question."
)


@on_gpu_runs
def obs3_ranking_differs(runs: list[Run]) -> Verdict:
    """Paper (Obs. 3): "framework ranking differs by application (MXNet faster on CNNs, TensorFlow
    faster on NMT)". Rule: the paper's direction per model class, each lead beyond the noise; a
    tie within the noise or the other framework ahead does not hold."""
    rule = (
        "like runs that differ only in framework, at the largest batch both ran: MXNet faster than TensorFlow on "
        "every CNN compared (resnet50, inception_v3) and TensorFlow faster than MXNet on NMT (seq2seq), each lead "
        f"beyond max({TOLERANCE:.0%}, the points' spread); needs both a CNN and NMT; a tie within the noise does not hold"
    )
    evidence, verdicts, classes = [], [], set()
    groups: dict[tuple, dict[str, list[Run]]] = {}
    for r in runs:
        if r.model in PAPER_FASTER and r.framework in ("mxnet", "tensorflow") and r.world_size == 1:
            groups.setdefault(r.series.but("framework"), {}).setdefault(r.framework, []).append(r)
    for key, by_fw in sorted(groups.items()):
        if len(by_fw) < 2:
            continue
        common = {r.batch_size for r in by_fw["mxnet"]} & {r.batch_size for r in by_fw["tensorflow"]}
        if not common:
            continue
        batch = max(common)
        pts = {f: mean_by_batch([r for r in rs if r.batch_size == batch], throughput)[0] for f, rs in by_fw.items()}
        model = key[0]
        want = PAPER_FASTER[model]
        other = "tensorflow" if want == "mxnet" else "mxnet"
        (_, a, sa, _), (_, b, sb, _) = pts[want], pts[other]
        ok = _beyond_noise(a, sa, b, sb)
        how = (
            "as the paper" if ok else "the other way round" if _beyond_noise(b, sb, a, sa) else "a tie within the noise"
        )
        verdicts.append(ok)
        classes.add(PAPER_CLASSES[model])
        evidence.append(
            f"{'✓' if ok else '✗'} {model} b{batch} ({PAPER_CLASSES[model]}): {want} {a:,.3g} vs {other} "
            f"{b:,.3g} -> {how}"
        )
    if verdicts and not all(verdicts):
        return Verdict(3, OBSERVATIONS[3], FAILS, rule, evidence, OBS3_NOTE)
    if classes != {"CNN", "NMT"}:
        return Verdict(
            3,
            OBSERVATIONS[3],
            NO_DATA,
            rule,
            evidence
            + [
                "needs MXNet and TensorFlow runs of a CNN (resnet50 or inception_v3) and of NMT (seq2seq); compared: "
                + (", ".join(sorted(classes)) or "none")
            ],
            OBS3_NOTE,
        )
    return Verdict(3, OBSERVATIONS[3], HOLDS, rule, evidence, OBS3_NOTE)


@on_gpu_runs
def obs4_gpu_util_rises(runs: list[Run]) -> Verdict:
    """Paper (Obs. 4): "larger mini-batches raise GPU compute utilization". Rule: _rises_with_batch."""
    return _rises_with_batch(runs, "gpu_utilization", 4, "GPU utilization (NVML)")


def _at_largest_batch(runs: list[Run], model_set: frozenset[str] | set[str], metric: str) -> list[tuple[str, float]]:
    out = []
    for s, rs in by_series(runs).items():
        if s.model in model_set:
            pts = mean_by_batch(rs, lambda r: r.metric(metric))
            if pts:
                out.append((f"{_name(s)} b{pts[-1][0]}", pts[-1][1]))
    return out


HIGH_GPU_UTILIZATION = 95.0  # % the paper's non-RNN models reach at large batch (Obs. 5)


@on_gpu_runs
def obs5_lstm_low_util(runs: list[Run]) -> Verdict:
    """Paper (Obs. 5): "LSTM models have low GPU compute utilization even at max batch; Transformer
    does not" — the non-RNN models reach >= 95% at large batch. Rule: both halves."""
    rule = (
        f"GPU utilization (NVML) at each series' largest batch: every non-RNN series >= {HIGH_GPU_UTILIZATION:.0f}%, "
        f"and every LSTM series (seq2seq) low: below {HIGH_GPU_UTILIZATION:.0f}% and below every non-RNN series"
    )
    lstm = _at_largest_batch(runs, lstm_models(), "gpu_utilization")
    others = _at_largest_batch(runs, {r.model for r in runs} - rnn_models(), "gpu_utilization")
    if not lstm or not others:
        return Verdict(
            5,
            OBSERVATIONS[5],
            NO_DATA,
            rule,
            [f"{name}: {v:.1f}%" for name, v in lstm + others]
            + [f"needs GPU utilization of an LSTM (seq2seq) and a non-RNN model ({_reasons(runs, 'gpu_utilization')})"],
        )
    floor = min(v for _, v in others)
    evidence = [f"{'✓' if v < HIGH_GPU_UTILIZATION and v < floor else '✗'} LSTM {name}: {v:.1f}%" for name, v in lstm]
    evidence += [f"{'✓' if v >= HIGH_GPU_UTILIZATION else '✗'} non-RNN {name}: {v:.1f}%" for name, v in others]
    ok = all(e.startswith("✓") for e in evidence)
    return Verdict(5, OBSERVATIONS[5], HOLDS if ok else FAILS, rule, evidence)


@on_gpu_runs
def obs6_fp32_util_rises(runs: list[Run]) -> Verdict:
    """Paper (Obs. 6): "larger mini-batches raise FP32 utilization". Rule: _rises_with_batch."""
    return _rises_with_batch(runs, "fp32_utilization", 6, "FP32 utilization")


@on_gpu_runs
def obs7_rnn_low_fp32(runs: list[Run]) -> Verdict:
    """Paper (Obs. 7): "RNN models have much lower FP32 utilization than non-RNN models". Rule:
    the RNN series' mean at their largest batch is at most half the non-RNN series' mean."""
    rule = "mean FP32 utilization at the largest batch of RNN models <= 0.5 x that of non-RNN models"
    rnn = _at_largest_batch(runs, rnn_models(), "fp32_utilization")
    others = _at_largest_batch(runs, {r.model for r in runs} - rnn_models(), "fp32_utilization")
    evidence = [f"{name}: {v:.1f}%" for name, v in rnn + others]
    if not rnn or not others:
        return Verdict(
            7,
            OBSERVATIONS[7],
            NO_DATA,
            rule,
            evidence + [f"needs FP32 utilization of RNN and non-RNN runs ({_reasons(runs, 'fp32_utilization')})"],
        )
    a, b = sum(v for _, v in rnn) / len(rnn), sum(v for _, v in others) / len(others)
    evidence.append(f"RNN mean {a:.1f}% vs non-RNN mean {b:.1f}%")
    return Verdict(7, OBSERVATIONS[7], HOLDS if a <= 0.5 * b else FAILS, rule, evidence)


def _measured_kernels(run: Run) -> tuple[list[dict], float | None]:
    """The kernels with FP32 utilization and a time share, and their time-weighted average."""
    measured = [k for k in run.kernels if k.get("fp32_utilization") is not None and k.get("time_share")]
    if not measured:
        return [], None
    weight = sum(k["time_share"] for k in measured)
    return measured, sum(k["fp32_utilization"] * k["time_share"] for k in measured) / weight


def long_kernels_below_average(run: Run, top: int = 5) -> list[dict]:
    """Paper Tables V/VI: the longest kernels whose FP32 utilization is below the run's average
    (time-weighted over the kernels measured)."""
    measured, average = _measured_kernels(run)
    below = [dict(k, average_fp32=average) for k in measured if average is not None and k["fp32_utilization"] < average]
    return sorted(below, key=lambda k: -k["time_share"])[:top]


OBS8_CNNS = ("resnet50",)  # the CNN the paper's Tables V and VI (and Obs. 8) show
LOW_FP32 = 0.8  # "low": more than 20% below the run's average FP32 utilization
MATERIAL_SHARE = 0.02  # "long-running": at least 2% of GPU time (Table V's shortest row is 2.48%)
BATCH_NORM = re.compile(r"bn_|batch_?norm", re.IGNORECASE)


@on_gpu_runs
def obs8_long_low_kernels(runs: list[Run]) -> Verdict:
    """Paper (Obs. 8, Tables V/VI): "long-running kernels with low FP32 utilization exist even in
    optimized CNNs (batch norm, activations)". Rule: in every run with a kernel table of every CNN
    the paper names, a kernel more than 20% below the average FP32 utilization takes >= 2% of GPU
    time, and a batch-norm kernel below the average takes >= 2%."""
    rule = (
        f"every run with FP32 kernel data of each CNN the paper names ({', '.join(OBS8_CNNS)}): a kernel with FP32 "
        f"utilization < {LOW_FP32:g} x the run's time-weighted average takes >= {MATERIAL_SHARE:.0%} of GPU time, and a "
        f"batch-norm kernel below the average takes >= {MATERIAL_SHARE:.0%}"
    )
    evidence: list[str] = []
    per_model: dict[str, list[bool]] = {m: [] for m in OBS8_CNNS}
    for r in runs:
        measured, average = _measured_kernels(r)
        if r.model not in per_model or average is None:
            continue
        low = sorted(
            (k for k in measured if k["fp32_utilization"] < LOW_FP32 * average and k["time_share"] >= MATERIAL_SHARE),
            key=lambda k: -k["time_share"],
        )
        bn = [
            k
            for k in measured
            if BATCH_NORM.search(k["kernel"]) and k["fp32_utilization"] < average and k["time_share"] >= MATERIAL_SHARE
        ]
        ok = bool(low) and bool(bn)
        per_model[r.model].append(ok)
        evidence.append(
            f"{'✓' if ok else '✗'} {_name(r.series)} b{r.batch_size}: average {average:.1f}%; low: "
            + (
                ", ".join(f"{k['kernel'][:40]} {k['time_share']:.1%} at {k['fp32_utilization']:.0f}%" for k in low[:3])
                or "none"
            )
            + ("; batch norm: " + (bn[0]["kernel"][:40] if bn else "none below the average"))
        )
    verdicts = [ok for oks in per_model.values() for ok in oks]
    missing = [m for m, oks in per_model.items() if not oks]
    if missing and all(verdicts):
        return Verdict(
            8,
            OBSERVATIONS[8],
            NO_DATA,
            rule,
            evidence + [f"no kernel table with FP32 utilization (kernels.csv) for {', '.join(missing)}"],
        )
    return _decide(8, rule, verdicts, evidence, [])


@on_gpu_runs
def obs9_faster_gpu_lower_util(runs: list[Run]) -> Verdict:
    """Paper (Obs. 9): "a faster GPU raises throughput but its GPU and FP32 utilization are
    lower" (for most models). Rule: the faster GPU is the one with the higher peak FLOP/s
    (tbdkit.analysis.peak), never the one that measured faster; over like runs on two GPUs it must
    raise throughput beyond the noise and have lower GPU and FP32 utilization; holds for most
    (more than half) of the comparisons."""
    rule = (
        "like runs (same batch) on two GPUs: the GPU with the higher peak FLOP/s (tbdkit's peak table) has higher "
        f"throughput beyond max({TOLERANCE:.0%}, the points' spread) and lower GPU and FP32 utilization (those measured); "
        "holds when most (more than half) of the comparisons do"
    )
    groups: dict[tuple, dict[str, list[Run]]] = {}
    for r in runs:
        if r.world_size == 1:
            groups.setdefault((*r.series.but("device"), r.batch_size), {}).setdefault(r.device_name, []).append(r)
    evidence, verdicts, unknown = [], [], set()
    for key, devs in sorted(groups.items()):
        peaks = {d: rs[0].peak_flops() for d, rs in devs.items()}
        unknown |= {d for d, p in peaks.items() if p is None}
        known = {d: p for d, p in peaks.items() if p is not None}
        if len(known) < 2 or len(set(known.values())) < 2:
            continue
        fast, slow = max(known, key=lambda d: known[d]), min(known, key=lambda d: known[d])

        def point(
            d: str, value: Callable[[Run], float | None], devs: dict[str, list[Run]] = devs
        ) -> tuple[float, float] | None:
            pts = mean_by_batch(devs[d], value)
            return (pts[0][1], pts[0][2]) if pts else None

        tf, ts = point(fast, throughput), point(slow, throughput)
        utils: list[tuple[str, float, float]] = []  # (metric, slow device's, fast device's)
        for m in ("gpu_utilization", "fp32_utilization"):
            a, b = (
                point(slow, functools.partial(Run.metric, name=m)),
                point(fast, functools.partial(Run.metric, name=m)),
            )
            if a is not None and b is not None:
                utils.append((m, a[0], b[0]))
        if tf is None or ts is None or not utils:
            continue
        ok = _beyond_noise(tf[0], tf[1], ts[0], ts[1]) and all(b < a for _, a, b in utils)
        verdicts.append(ok)
        evidence.append(
            f"{'✓' if ok else '✗'} {key[0]}/{key[1]} b{key[-1]}: {fast} ({known[fast] / 1e12:.1f} TFLOP/s peak) "
            f"{tf[0]:,.3g} vs {slow} ({known[slow] / 1e12:.1f}) {ts[0]:,.3g}; "
            + ", ".join(f"{m} {b:.1f}% vs {a:.1f}%" for m, a, b in utils)
        )
    if unknown:
        evidence.append(f"peak FLOP/s not on disk for {', '.join(sorted(unknown))} (runs that recorded no MFU peak)")
    if not verdicts:
        return Verdict(
            9,
            OBSERVATIONS[9],
            NO_DATA,
            rule,
            evidence + ["needs like runs on two or more GPU models with known peaks, with utilization"],
        )
    held = sum(verdicts)
    evidence.append(f"{held} of {len(verdicts)} comparison(s) hold")
    return Verdict(9, OBSERVATIONS[9], HOLDS if held > len(verdicts) / 2 else FAILS, rule, evidence)


PAPER_FEATURE_MAP_SHARE = (0.62, 0.89)  # Obs. 10: 62% (Deep Speech 2) to 89% (ResNet-50, Sockeye)


@on_gpu_runs
def obs10_feature_maps_dominate(runs: list[Run]) -> Verdict:
    """Paper (Obs. 10): "feature maps dominate memory (62% DS2 to 89% ResNet-50/Sockeye)". Rule:
    over all five categories, feature maps are the largest and their share is within 62-89%; a
    run with a category not measured cannot decide it."""
    lo, hi = PAPER_FEATURE_MAP_SHARE
    rule = (
        f"every GPU run whose memory breakdown measured all five categories (weights, weight gradients, feature maps, "
        f"workspace, dynamic): feature maps are the largest and their share of the five is within {lo:.0%}-{hi:.0%}"
    )
    evidence, verdicts, undecided = [], [], []
    for r in runs:
        if not r.memory:
            continue
        values = {c: r.memory_bytes(c) for c in MEMORY_CATEGORIES}
        unmeasured = [c for c, v in values.items() if v is None]
        total = sum(v for v in values.values() if v)
        if unmeasured or not total:
            undecided.append(f"{_name(r.series)} b{r.batch_size}: not measured: {', '.join(unmeasured) or 'all zero'}")
            continue
        shares = {c: (v or 0) / total for c, v in values.items()}
        fm = shares["feature_maps"]
        ok = max(shares, key=lambda c: shares[c]) == "feature_maps" and lo <= fm <= hi
        verdicts.append(ok)
        evidence.append(
            f"{'✓' if ok else '✗'} {_name(r.series)} b{r.batch_size}: feature maps {fm:.0%}, weights "
            f"{shares['weights']:.0%}, gradients {shares['weight_gradients']:.0%}, workspace "
            f"{shares['workspace']:.0%}, dynamic {shares['dynamic']:.0%}"
        )
    return _decide(
        10,
        rule,
        verdicts,
        evidence[:12],
        undecided[:6] + ["no GPU run has a memory breakdown with all five categories measured (memory.json)"],
    )


@on_gpu_runs
def obs11_feature_maps_linear(runs: list[Run]) -> Verdict:
    """Paper (Obs. 11): "feature-map memory grows almost linearly with mini-batch size". Rule: a
    line fits (R^2 >= 0.98) and the growth is 0.8-1.2x proportional."""
    rule = (
        "feature-map bytes vs batch size in each series of like runs with >= 3 batch sizes (>= 2 if only two): a line "
        "fits with R^2 >= 0.98 and growth from the smallest to the largest batch is 0.8-1.2x proportional"
    )
    evidence, verdicts = [], []
    for s, rs in by_series(runs).items():
        pts = mean_by_batch(rs, lambda r: r.memory_bytes("feature_maps"))
        if len(pts) < 2:
            continue
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        proportional = (ys[-1] / ys[0]) / (xs[-1] / xs[0]) if ys[0] else float("nan")
        r2 = _r_squared(xs, ys)
        ok = 0.8 <= proportional <= 1.2 and r2 >= 0.98
        verdicts.append(ok)
        evidence.append(
            f"{'✓' if ok else '✗'} {_name(s)}: "
            + ", ".join(f"b{x}: {y / 2**20:,.1f} MiB" for x, y in zip(xs, ys))
            + f"; growth/proportional {proportional:.2f}, R^2 {r2:.3f}"
        )
    return _decide(11, rule, verdicts, evidence, ["no series has feature-map bytes at two or more batch sizes"])


def _r_squared(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    if n < 3:
        return 1.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    if not sxx or not ss_tot:
        return 1.0
    slope = sxy / sxx
    ss_res = sum((y - (my + slope * (x - mx))) ** 2 for x, y in zip(xs, ys))
    return 1 - ss_res / ss_tot


_RATE = re.compile(r"\s*([0-9.]+)\s*([kmgt]?)(?:bit|bps|b)?(?:/s)?\s*", re.IGNORECASE)


def link_bits_per_s(rate: str | None) -> float:
    """A link rate as `tbdkit bench --link-rate` takes it ("1gbit", "100mbit") in bit/s; no rate
    (an unshaped link) is the fastest."""
    m = _RATE.fullmatch(rate or "")
    if not m:
        return math.inf
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2).lower()]


def _per_worker(r: Run) -> tuple[float, float]:
    """(per-worker throughput, its 95% CI half-width)."""
    entry = r.metric_entry("per_worker_throughput")
    if isinstance(entry.get("value"), (int, float)):
        return float(entry["value"]), float(entry.get("ci95_half_width") or 0.0)
    return (throughput(r) or 0.0) / r.world_size, (r.ci95_half_width or 0.0) / r.world_size


SCALES_WELL = 0.8  # "multi-GPU over PCIe scales well": >= 80% of N x the single-GPU throughput


@on_gpu_runs
def obs12_bandwidth(runs: list[Run]) -> Verdict:
    """Paper (Obs. 12): "multi-machine scaling needs network bandwidth: 1 Gbps degrades 2-machine
    throughput; multi-GPU over PCIe scales well". Rule: two halves, both needed. (a) like
    multi-machine runs on links of different rates: per-worker throughput on the slower link is
    lower beyond the 95% CIs (the intervals do not overlap). (b) several GPUs in one machine vs the
    like single-GPU run at the same per-GPU batch: scaling efficiency >= 80%."""
    rule = (
        "(a) like multi-machine runs on links of different rates: per-worker throughput on the slower link below the "
        "faster link's, beyond both 95% CIs; (b) like runs on N GPUs of one machine (PCIe): aggregate throughput "
        f">= {SCALES_WELL:.0%} of N x the like single-GPU run at the same per-GPU batch; holds when both halves hold"
    )
    links: dict[tuple, dict[str, list[Run]]] = {}
    for r in runs:
        if r.nodes > 1:
            links.setdefault((*r.series.but("link_rate"), r.batch_size), {}).setdefault(r.link_rate or "", []).append(r)
    evidence, link_ok, pcie_ok = [], [], []
    for key, by_rate in sorted(links.items()):
        if len(by_rate) < 2:
            continue
        fast_rate = max(by_rate, key=link_bits_per_s)
        slow_rate = min(by_rate, key=link_bits_per_s)
        (f, fci), (s, sci) = (
            max((_per_worker(r) for r in by_rate[x]), key=lambda p: p[0]) for x in (fast_rate, slow_rate)
        )
        ok = f - fci > s + sci
        link_ok.append(ok)
        evidence.append(
            f"{'✓' if ok else '✗'} (a) {key[0]}/{key[1]} b{key[-1]} x{key[7]} machines: per worker {f:,.3g} ±{fci:,.2g} "
            f"on {fast_rate or 'the unshaped link'} vs {s:,.3g} ±{sci:,.2g} on {slow_rate}"
        )
    singles = {(r.series, r.batch_size): r for r in runs if r.world_size == 1}
    for r in runs:
        if r.nodes != 1 or r.gpus_per_node < 2:
            continue
        base = singles.get((r.series._replace(gpus_per_node=1, link_rate="", one_process=False), r.batch_size))
        if base is None or not throughput(base):
            evidence.append(f"(b) {_name(r.series)} b{r.batch_size}: no like single-GPU run to compare with")
            continue
        aggregate = r.metric("aggregate_throughput") or throughput(r) or 0.0
        efficiency = aggregate / (r.gpus_per_node * (throughput(base) or 1.0))
        ok = efficiency >= SCALES_WELL
        pcie_ok.append(ok)
        evidence.append(
            f"{'✓' if ok else '✗'} (b) {r.model}/{r.framework} b{r.batch_size} on {r.gpus_per_node} GPUs of one "
            f"machine: {aggregate:,.3g} vs 1 GPU {throughput(base):,.3g} -> {efficiency:.0%} scaling efficiency"
        )
    if not all(link_ok + pcie_ok):
        return Verdict(12, OBSERVATIONS[12], FAILS, rule, evidence)
    lacking = (
        []
        if link_ok
        else ["(a) needs like multi-machine GPU runs on two link rates (tbdkit bench --nodes N --link-rate RATE)"]
    ) + (
        [] if pcie_ok else ["(b) needs a multi-GPU run in one machine and its like single-GPU run (--gpus-per-node N)"]
    )
    if lacking:
        return Verdict(12, OBSERVATIONS[12], NO_DATA, rule, evidence + lacking)
    return Verdict(12, OBSERVATIONS[12], HOLDS, rule, evidence)


CHECKS: tuple[Callable[[list[Run]], Verdict], ...] = (
    obs1_throughput_rises,
    obs2_rnn_no_saturation,
    obs3_ranking_differs,
    obs4_gpu_util_rises,
    obs5_lstm_low_util,
    obs6_fp32_util_rises,
    obs7_rnn_low_fp32,
    obs8_long_low_kernels,
    obs9_faster_gpu_lower_util,
    obs10_feature_maps_dominate,
    obs11_feature_maps_linear,
    obs12_bandwidth,
)


def check_all(runs: list[Run]) -> list[Verdict]:
    wording = reference_observations()
    runs = without_failed_metrics(runs)  # an instrument that failed calibration here is no evidence
    verdicts = [check(runs) for check in CHECKS]
    for v in verdicts:
        v.claim = wording.get(v.n, v.claim)
    return verdicts
