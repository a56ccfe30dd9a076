"""The paper's twelve observations, each checked against the runs present.

Every check is a plain function over the runs (in the manner of Holistic Trace Analysis) that
returns a verdict — holds, does not hold, or not enough data — with the rule it applied and the
numbers that decided it. The observations' wording comes from the reference file; the rules are
this kit's, stated in each verdict so that a reader can disagree with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

try:
    import tomllib  # novermin
except ModuleNotFoundError:  # Python 3.10 (the MXNet image): tomli is the same parser
    import tomli as tomllib  # type: ignore[no-redef]

from tbdkit.report.runs import CNN_MODELS, LSTM_MODELS, MEMORY_CATEGORIES, RNN_MODELS, Run, by_series, mean_by_batch, throughput

HOLDS, FAILS, NO_DATA = "holds", "does not hold", "not enough data"
TOLERANCE = 0.02  # a step counts as a drop only beyond this fraction (or the run's 95% CI, if larger)


@dataclass
class Verdict:
    n: int
    claim: str
    verdict: str
    rule: str
    evidence: list[str] = field(default_factory=list)


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


def _decide(n: int, rule: str, verdicts: list[bool], evidence: list[str], no_data: list[str],
            need_all: bool = True) -> Verdict:
    """The verdict from per-series checks: not enough data when none could be checked."""
    if not verdicts:
        return Verdict(n, OBSERVATIONS[n], NO_DATA, rule, no_data)
    ok = all(verdicts) if need_all else any(verdicts)
    return Verdict(n, OBSERVATIONS[n], HOLDS if ok else FAILS, rule, evidence)


def _name(s: tuple[str, str, str, str]) -> str:
    return f"{s[0]}/{s[1]}/{s[2]} on {s[3]}"


def _rises_with_batch(runs: list[Run], metric: str | None, n: int, what: str) -> Verdict:
    """Shared rule of observations 1, 4 and 6: over each series with two or more batch sizes, the
    value at the largest batch exceeds the value at the smallest, and no step down is larger than
    the tolerance (2%, or the run's 95% CI where that is larger)."""
    value = throughput if metric is None else (lambda r: r.metric(metric))
    rule = (f"every model/framework/precision/device series with >= 2 batch sizes: {what} at the largest batch > "
            f"at the smallest, and no step down beyond max({TOLERANCE:.0%}, the run's 95% CI)")
    evidence, verdicts = [], []
    for s, rs in by_series(runs).items():
        pts = mean_by_batch(rs, value)
        if len(pts) < 2:
            continue
        drops = [(a, b) for a, b in zip(pts, pts[1:])
                 if b[1] < a[1] * (1 - TOLERANCE) - max(a[2], b[2])]
        ok = pts[-1][1] > pts[0][1] and not drops
        verdicts.append(ok)
        steps = ", ".join(f"b{b}: {v:,.3g}" for b, v, _, _ in pts)
        evidence.append(f"{'✓' if ok else '✗'} {_name(s)}: {steps}"
                        + (f" (drop after b{drops[0][0][0]})" if drops else ""))
    return _decide(n, rule, verdicts, evidence, [f"no series has {what} at two or more batch sizes"
                                                 + (f" ({_reasons(runs, metric)})" if metric else "")])


def _reasons(runs: list[Run], metric: str) -> str:
    reasons = sorted({r.metric_entry(metric).get("reason") or "not recorded" for r in runs})
    return "; ".join(reasons[:2]) or "no runs"


def obs1_throughput_rises(runs: list[Run]) -> Verdict:
    return _rises_with_batch(runs, None, 1, "throughput")


def obs2_rnn_no_saturation(runs: list[Run]) -> Verdict:
    rule = ("RNN models (deepspeech2, seq2seq): the last batch doubling still gains >= 10% throughput (no "
            "saturation); Deep Speech 2 'almost linear': throughput ~ batch^k with k >= 0.8 between its smallest "
            "and largest batch")
    evidence, verdicts = [], []
    for s, rs in by_series(runs).items():
        if s[0] not in RNN_MODELS:
            continue
        pts = mean_by_batch(rs, throughput)
        if len(pts) < 2:
            continue
        (b0, t0, _, _), (b1, t1, _, _) = pts[-2], pts[-1]
        gain_per_doubling = (t1 / t0) ** (1 / math.log2(b1 / b0)) - 1
        ok = gain_per_doubling >= 0.10
        line = f"{_name(s)}: last step b{b0}->b{b1} gains {gain_per_doubling:+.1%} per doubling"
        if s[0] == "deepspeech2":
            k = math.log(pts[-1][1] / pts[0][1]) / math.log(pts[-1][0] / pts[0][0])
            ok = ok and k >= 0.8
            line += f"; exponent k = {k:.2f} over b{pts[0][0]}..b{pts[-1][0]}"
        verdicts.append(ok)
        evidence.append(("✓ " if ok else "✗ ") + line)
    return _decide(2, rule, verdicts, evidence, ["no RNN model (deepspeech2, seq2seq) at two or more batch sizes"])


def obs3_ranking_differs(runs: list[Run]) -> Verdict:
    rule = ("for each model run on >= 2 frameworks (same precision and device), the fastest framework at the "
            "largest batch all of them ran; holds when the fastest framework is not the same for every model")
    winners: dict[str, str] = {}
    evidence = []
    models = sorted({r.model for r in runs})
    for model in models:
        mine = [r for r in runs if r.model == model and r.world_size == 1]
        keys = {(r.precision, r.device_name) for r in mine}
        for prec, dev in sorted(keys):
            same = [r for r in mine if (r.precision, r.device_name) == (prec, dev)]
            frameworks = sorted({r.framework for r in same})
            common = set.intersection(*({r.batch_size for r in same if r.framework == f} for f in frameworks))
            if len(frameworks) < 2 or not common:
                continue
            batch = max(common)
            speed = {f: sum(throughput(r) or 0 for r in same if r.framework == f and r.batch_size == batch)
                     / max(1, sum(1 for r in same if r.framework == f and r.batch_size == batch)) for f in frameworks}
            best = max(speed, key=lambda f: speed[f])
            winners[model] = best
            evidence.append(f"{model} b{batch} {prec} on {dev}: " +
                            ", ".join(f"{f} {v:,.3g}" for f, v in sorted(speed.items(), key=lambda kv: -kv[1]))
                            + f" -> {best} fastest")
            break
    if len(winners) < 2:
        return Verdict(3, OBSERVATIONS[3], NO_DATA, rule,
                       evidence + [f"{len(winners)} model(s) compared across frameworks; two or more are needed"])
    verdict = HOLDS if len(set(winners.values())) > 1 else FAILS
    return Verdict(3, OBSERVATIONS[3], verdict, rule, evidence)


def obs4_gpu_util_rises(runs: list[Run]) -> Verdict:
    return _rises_with_batch(runs, "gpu_utilization", 4, "GPU utilization (NVML)")


def _at_largest_batch(runs: list[Run], model_set: frozenset[str] | set[str], metric: str) -> list[tuple[str, float]]:
    out = []
    for s, rs in by_series(runs).items():
        if s[0] in model_set:
            pts = mean_by_batch(rs, lambda r: r.metric(metric))
            if pts:
                out.append((f"{_name(s)} b{pts[-1][0]}", pts[-1][1]))
    return out


def obs5_lstm_low_util(runs: list[Run]) -> Verdict:
    rule = ("GPU utilization (NVML) at the largest batch measured: every LSTM model (seq2seq) below every "
            "Transformer series")
    lstm = _at_largest_batch(runs, LSTM_MODELS, "gpu_utilization")
    transformer = _at_largest_batch(runs, {"transformer"}, "gpu_utilization")
    evidence = [f"{name}: {v:.1f}%" for name, v in lstm + transformer]
    if not lstm or not transformer:
        return Verdict(5, OBSERVATIONS[5], NO_DATA, rule,
                       evidence + [f"needs GPU utilization of seq2seq and transformer runs "
                                   f"({_reasons(runs, 'gpu_utilization')})"])
    ok = max(v for _, v in lstm) < min(v for _, v in transformer)
    return Verdict(5, OBSERVATIONS[5], HOLDS if ok else FAILS, rule, evidence)


def obs6_fp32_util_rises(runs: list[Run]) -> Verdict:
    return _rises_with_batch(runs, "fp32_utilization", 6, "FP32 utilization")


def obs7_rnn_low_fp32(runs: list[Run]) -> Verdict:
    rule = "mean FP32 utilization at the largest batch of RNN models <= 0.5 x that of non-RNN models"
    rnn = _at_largest_batch(runs, RNN_MODELS, "fp32_utilization")
    others = _at_largest_batch(runs, {r.model for r in runs} - RNN_MODELS, "fp32_utilization")
    evidence = [f"{name}: {v:.1f}%" for name, v in rnn + others]
    if not rnn or not others:
        return Verdict(7, OBSERVATIONS[7], NO_DATA, rule,
                       evidence + [f"needs FP32 utilization of RNN and non-RNN runs ({_reasons(runs, 'fp32_utilization')})"])
    a, b = sum(v for _, v in rnn) / len(rnn), sum(v for _, v in others) / len(others)
    evidence.append(f"RNN mean {a:.1f}% vs non-RNN mean {b:.1f}%")
    return Verdict(7, OBSERVATIONS[7], HOLDS if a <= 0.5 * b else FAILS, rule, evidence)


def long_kernels_below_average(run: Run, top: int = 5) -> list[dict]:
    """Paper Tables V/VI: the longest kernels whose FP32 utilization is below the run's average
    (time-weighted over the kernels measured)."""
    measured = [k for k in run.kernels if k.get("fp32_utilization") is not None and k.get("time_share")]
    if not measured:
        return []
    weight = sum(k["time_share"] for k in measured)
    average = sum(k["fp32_utilization"] * k["time_share"] for k in measured) / weight
    below = [dict(k, average_fp32=average) for k in measured if k["fp32_utilization"] < average]
    return sorted(below, key=lambda k: -k["time_share"])[:top]


def obs8_long_low_kernels(runs: list[Run]) -> Verdict:
    rule = ("in a CNN run with a kernel table: at least one of its five longest kernels below the average FP32 "
            "utilization takes >= 2% of GPU time")
    evidence, verdicts = [], []
    for r in runs:
        if r.model not in CNN_MODELS or not r.kernels:
            continue
        rows = long_kernels_below_average(r)
        if not any(k.get("fp32_utilization") is not None for k in r.kernels):
            continue
        ok = any(k["time_share"] >= 0.02 for k in rows)
        verdicts.append(ok)
        evidence.append(f"{'✓' if ok else '✗'} {r.model}/{r.framework} b{r.batch_size}: "
                        + ", ".join(f"{k['kernel'][:40]} {k['time_share']:.1%} at {k['fp32_utilization']:.0f}%"
                                    for k in rows[:3]))
    return _decide(8, rule, verdicts, evidence, ["no CNN run has a kernel table with FP32 utilization (kernels.csv)"], need_all=False)


def obs9_faster_gpu_lower_util(runs: list[Run]) -> Verdict:
    rule = ("same model, framework, batch and precision on two GPUs: the one with higher throughput has lower "
            "GPU utilization and lower FP32 utilization")
    groups: dict[tuple[str, str, int, str], dict[str, Run]] = {}
    for r in runs:
        if r.device.startswith("cuda") and r.world_size == 1:
            groups.setdefault((r.model, r.framework, r.batch_size, r.precision), {})[r.device_name] = r
    evidence, verdicts = [], []
    for key, devs in sorted(groups.items()):
        if len(devs) < 2:
            continue
        ranked = sorted(devs.values(), key=lambda r: throughput(r) or 0)
        slow, fast = ranked[0], ranked[-1]
        pairs = [(m, slow.metric(m), fast.metric(m)) for m in ("gpu_utilization", "fp32_utilization")]
        known = [(m, a, b) for m, a, b in pairs if a is not None and b is not None]
        if not known:
            continue
        ok = all(b < a for _, a, b in known)
        verdicts.append(ok)
        evidence.append(f"{'✓' if ok else '✗'} {key[0]}/{key[1]} b{key[2]}: {fast.device_name} "
                        f"{throughput(fast):,.3g} vs {slow.device_name} {throughput(slow):,.3g}; "
                        + ", ".join(f"{m} {b:.1f}% vs {a:.1f}%" for m, a, b in known))
    return _decide(9, rule, verdicts, evidence, ["needs the same runs on two or more GPU models, with utilization"])


def _shares(run: Run) -> dict[str, float] | None:
    values = {c: run.memory_bytes(c) for c in MEMORY_CATEGORIES}
    total = sum(v for v in values.values() if v)
    if not total or values.get("feature_maps") is None:
        return None
    return {c: (v or 0) / total for c, v in values.items()}


def obs10_feature_maps_dominate(runs: list[Run]) -> Verdict:
    rule = ("in every run with a memory breakdown, feature maps are the largest category (share of the categories "
            "measured; the paper reports 62% for DS2 to 89% for ResNet-50)")
    evidence, verdicts = [], []
    for r in runs:
        shares = _shares(r)
        if shares is None:
            continue
        ok = max(shares, key=lambda c: shares[c]) == "feature_maps"
        verdicts.append(ok)
        evidence.append(f"{'✓' if ok else '✗'} {r.model}/{r.framework} b{r.batch_size} on {r.device_name}: feature maps "
                        f"{shares['feature_maps']:.0%}, weights {shares['weights']:.0%}, gradients "
                        f"{shares['weight_gradients']:.0%}, workspace {shares['workspace']:.0%}, dynamic {shares['dynamic']:.0%}")
    return _decide(10, rule, verdicts, evidence[:12], ["no run has a memory breakdown with feature maps (memory.json)"])


def obs11_feature_maps_linear(runs: list[Run]) -> Verdict:
    rule = ("feature-map bytes vs batch size in each series with >= 3 batch sizes (>= 2 if only two): a line fits "
            "with R^2 >= 0.98 and growth from the smallest to the largest batch is 0.8-1.2x proportional")
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
        evidence.append(f"{'✓' if ok else '✗'} {_name(s)}: " + ", ".join(f"b{x}: {y / 2**20:,.1f} MiB" for x, y in zip(xs, ys))
                        + f"; growth/proportional {proportional:.2f}, R^2 {r2:.3f}")
    return _decide(11, rule, verdicts, evidence, ["no series has feature-map bytes at two or more batch sizes"])


def _r_squared(xs: list[float], ys: list[float]) -> float:
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


def obs12_bandwidth(runs: list[Run]) -> Verdict:
    rule = ("multi-machine runs of the same model, framework and per-worker batch on links of different rates: "
            "per-worker throughput is lower on the slower link")
    groups: dict[tuple[str, str, int, int], list[Run]] = {}
    for r in runs:
        if r.nodes > 1:
            groups.setdefault((r.model, r.framework, r.batch_size, r.nodes), []).append(r)
    evidence, verdicts = [], []
    for key, rs in sorted(groups.items()):
        shaped = [r for r in rs if r.link_rate]
        unshaped = [r for r in rs if not r.link_rate]
        if not shaped or not unshaped:
            continue
        def per_worker(r: Run) -> float:
            return r.metric("per_worker_throughput") or (throughput(r) or 0) / r.world_size
        fast = max(per_worker(r) for r in unshaped)
        slow = max(per_worker(r) for r in shaped)
        ok = slow < fast
        verdicts.append(ok)
        evidence.append(f"{'✓' if ok else '✗'} {key[0]}/{key[1]} b{key[2]} x{key[3]} nodes: per worker "
                        f"{fast:,.3g} unshaped vs {slow:,.3g} at {shaped[0].link_rate}")
    return _decide(12, rule, verdicts, evidence,
                   ["needs multi-node runs with and without a limited link (tbdkit bench --nodes N --link-rate RATE)"])


CHECKS: tuple[Callable[[list[Run]], Verdict], ...] = (
    obs1_throughput_rises, obs2_rnn_no_saturation, obs3_ranking_differs, obs4_gpu_util_rises, obs5_lstm_low_util,
    obs6_fp32_util_rises, obs7_rnn_low_fp32, obs8_long_low_kernels, obs9_faster_gpu_lower_util,
    obs10_feature_maps_dominate, obs11_feature_maps_linear, obs12_bandwidth)


def check_all(runs: list[Run]) -> list[Verdict]:
    wording = reference_observations()
    verdicts = [check(runs) for check in CHECKS]
    for v in verdicts:
        v.claim = wording.get(v.n, v.claim)
    return verdicts
