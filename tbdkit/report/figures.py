"""The paper's figures, drawn from runs with matplotlib (the field's plotting standard).

Each figure function takes the runs and returns a Figure with its matplotlib object, or a
Missing that says why it cannot be drawn from these results: a figure is never drawn from
values the runs do not hold (GPU utilization of CPU runs, a memory breakdown nobody measured).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from tbdkit.report.runs import (  # noqa: E402
    MEMORY_CATEGORIES,
    Run,
    SeriesKey,
    by_series,
    mean_by_batch,
    noise_unknown,
    throughput,
)
from tbdkit.results.rundir import RunDir  # noqa: E402

NO_ERROR_BAR = "no-error-bar"  # the gid (an id in the SVG) of the marks on points whose spread is unknown
MEMORY_COLORS = {
    "weights": "#4c72b0",
    "weight_gradients": "#55a868",
    "feature_maps": "#c44e52",
    "workspace": "#8172b2",
    "dynamic": "#ccb974",
}


@dataclass
class Figure:
    key: str
    title: str
    caption: str
    figure: Any  # matplotlib.figure.Figure
    files: dict[str, Path] | None = None


@dataclass
class Missing:
    key: str
    title: str
    reason: str


Result = Figure | Missing


def _reason_of(runs: list[Run], metric: str) -> str:
    reasons = sorted({r.metric_entry(metric).get("reason") or "not recorded by this kit version" for r in runs})
    return "; ".join(reasons[:3])


def _panels(n: int, sharey: bool = False) -> tuple[Any, list[Any]]:
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False, sharey=sharey)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _label(series: SeriesKey, varying: list[int]) -> str:
    """A line's legend: its framework and precision, and every other key field that differs
    between the lines of its panel (preset, variant, data, device...), so unlike lines read apart."""
    return " ".join([series.framework, series.precision] + [str(series[i]) or "unshaped" for i in varying])


def _varying(keys: list[SeriesKey]) -> list[int]:
    """The key fields (other than model, framework and precision) whose values differ among keys."""
    skip = {"model", "framework", "precision"}
    return [i for i, f in enumerate(SeriesKey._fields) if f not in skip and len({k[i] for k in keys}) > 1]


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")  # one per line of a panel: equal points stay told apart
DODGE_LOG2 = 0.04  # how far apart (in log2 of the batch size) lines at the same batch sizes are drawn


def _lines_vs_batch(
    runs: list[Run], key: str, title: str, caption: str, metrics: dict[str, str], ylabel: Callable[[Run], str]
) -> Result:
    """One panel per model, one line per (framework, precision, device[, metric]) over batch size."""
    series = by_series(runs)
    lines: dict[str, list[tuple[SeriesKey, str, list]]] = {}
    for s, rs in series.items():
        for metric in metrics:
            points = mean_by_batch(rs, throughput if metric == "throughput" else (lambda r, m=metric: r.metric(m)))
            if points:
                lines.setdefault(s[0], []).append((s, metric if len(metrics) > 1 else "", points))
    if not lines:
        return Missing(
            key, title, f"no run holds a value for {', '.join(metrics)}: {_reason_of(runs, next(iter(metrics)))}"
        )
    fig, axes = _panels(len(lines))
    for ax, (model, model_lines) in zip(axes, sorted(lines.items())):
        varying = _varying([s for s, _, _ in model_lines])
        colors: dict[SeriesKey, str] = {}  # one color per series; the line style tells the metric
        for k, (s, metric, points) in enumerate(model_lines):
            color = colors.setdefault(s, f"C{len(colors) % 10}")
            marker = MARKERS[k % len(MARKERS)]
            # lines at the same batch sizes are set a little apart (on the log axis), so equal points stay visible
            dodge = 2 ** ((k - (len(model_lines) - 1) / 2) * DODGE_LOG2)
            batch_sizes = [p[0] for p in points]
            xs = [x * dodge for x in batch_sizes]
            ys = [p[1] for p in points]
            err = [p[2] for p in points]
            label = _label(s, varying) + (f" ({metric.replace('_', ' ')})" if metric else "")
            below = [max(0.0, min(e, y)) for e, y in zip(err, ys)]  # a spread never reaches below zero
            ax.errorbar(
                xs,
                ys,
                yerr=[below, err],
                marker=marker,
                capsize=3,
                label=label,
                color=color,
                alpha=0.8,
                linestyle=metrics[metric or next(iter(metrics))],
            )
            disturbed = [
                (x, y)
                for x, b, y in zip(xs, batch_sizes, ys)
                if any(r.disturbed for r in series[s] if r.batch_size == b)
            ]
            if disturbed:  # hollow: something else competed for the machine in at least one run of the point
                ax.scatter(*zip(*disturbed), s=36, facecolors="white", edgecolors=color, linewidths=1.5, zorder=3)
            # a single run without a CI: marked, since its missing error bar would read as a bar of zero
            if (metric or next(iter(metrics))) == "throughput":
                at = [[r for r in series[s] if r.batch_size == b] for b in batch_sizes]
                bare = [(x, y) for x, y, same in zip(xs, ys, at) if noise_unknown(same)]
                if bare:
                    ax.scatter(*zip(*bare), s=70, marker="x", color=color, linewidths=1.2, zorder=4, gid=NO_ERROR_BAR)
            unstable = [(x, y) for x, y, p in zip(xs, ys, points) if p[3]]
            if unstable:
                ax.scatter(*zip(*unstable), s=140, facecolors="none", edgecolors=color, linewidths=1.5)
        first = next(r for r in runs if r.model == model)
        ax.set_title(model)
        ax.set_xscale("log", base=2)
        batches = sorted({p[0] for _, _, points in model_lines for p in points})
        ax.set_xticks(batches, [str(b) for b in batches])  # the batch sizes run, as the paper labels them
        ax.minorticks_off()
        ax.set_xlabel("mini-batch size")
        ax.set_ylabel(ylabel(first))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return Figure(key, title, caption, fig)


def throughput_vs_batch(runs: list[Run]) -> Result:
    return _lines_vs_batch(
        runs,
        "fig4_throughput",
        "Throughput vs mini-batch size (paper Fig. 4)",
        "Mean over repeats; error bars: standard deviation of repeats, or a single run's 95% CI; "
        "×: a single run without a 95% CI (its window had one iteration), so no error bar can be drawn. "
        "Circled points: flagged unstable by the sweep. Hollow points: disturbed runs (foreign load, another "
        "GPU process or throttling in the window). Each line has its own marker and is set a little apart from "
        "the others at each batch size, so equal values stay visible.",
        {"throughput": "-"},
        lambda r: f"throughput ({r.unit})",
    )


def samples_per_kj_vs_batch(runs: list[Run]) -> Result:
    return _lines_vs_batch(
        runs,
        "energy_samples_per_kj",
        "Samples per kJ vs mini-batch size (beside Fig. 4's throughput)",
        "Samples trained per kilojoule of the training device's energy over the sample window (Zeus: NVML's energy "
        "counter on GPUs, RAPL on CPUs). Mean over repeats.",
        {"samples_per_kj": "-"},
        lambda r: f"samples per kJ ({r.metric_entry('samples_per_kj').get('unit') or ''})",
    )


def gpu_utilization_vs_batch(runs: list[Run]) -> Result:
    return _lines_vs_batch(
        runs,
        "fig5_gpu_utilization",
        "GPU compute utilization vs mini-batch size (paper Fig. 5)",
        "Solid: NVML utilization.gpu sampled over the window; dashed: kernel-timeline union / elapsed.",
        {"gpu_utilization": "-", "gpu_utilization_trace": "--"},
        lambda r: "GPU utilization (%)",
    )


def fp32_utilization_vs_batch(runs: list[Run]) -> Result:
    return _lines_vs_batch(
        runs,
        "fig6_fp32_utilization",
        "FP32 and tensor-core utilization vs mini-batch size (paper Fig. 6)",
        "Solid: FP32 utilization (paper eq. 2, Nsight Compute); dashed: tensor-pipe utilization.",
        {"fp32_utilization": "-", "tensor_utilization": "--"},
        lambda r: "utilization (%)",
    )


DEVICE_METRICS = (
    ("throughput", "throughput"),
    ("gpu_utilization", "GPU utilization"),
    ("fp32_utilization", "FP32 utilization"),
)


def across_devices(runs: list[Run]) -> Result:
    """Paper Fig. 7: like runs (same series but the GPU, same batch) on two or more GPUs,
    throughput, GPU utilization and FP32 utilization each normalized to one baseline GPU: the GPU
    in the most comparisons (a CPU is never a baseline nor a bar: the figure compares GPUs)."""
    key, title = "fig7_devices", "The same model across GPUs, normalized (paper Fig. 7)"
    groups: dict[tuple, dict[str, list[Run]]] = {}
    for r in runs:
        if r.is_gpu and r.world_size == 1 and throughput(r) is not None:
            groups.setdefault((*r.series.but("device"), r.batch_size), {}).setdefault(r.device_name, []).append(r)
    comparable = {k: v for k, v in groups.items() if len(v) > 1}
    if not comparable:
        names = sorted({r.device_name for r in runs if r.is_gpu})
        cpus = sum(not r.is_gpu for r in runs)
        return Missing(
            key,
            title,
            "needs like runs (same model, framework, preset, variant, data, batch and precision) on "
            f"two or more GPUs; these results hold {len(names)} GPU(s): {', '.join(names) or 'none'}"
            + (f" ({cpus} CPU run(s) are not compared with GPUs)" if cpus else ""),
        )
    counts: dict[str, int] = {}
    for devs in comparable.values():
        for d in devs:
            counts[d] = counts.get(d, 0) + 1
    base = min(counts, key=lambda d: (-counts[d], d))
    drawn = {k: v for k, v in sorted(comparable.items()) if base in v}
    devices = sorted({d for v in drawn.values() for d in v}, key=lambda d: (d != base, d))
    fig, axes = plt.subplots(
        1,
        len(DEVICE_METRICS),
        figsize=(max(9.0, 3.2 * len(DEVICE_METRICS) * max(1, len(drawn)) ** 0.5), 3.8),
        squeeze=False,
    )
    width = 0.8 / len(devices)
    labels = [f"{k[0]}\n{k[1]} b{k[-1]}" for k in drawn]
    unmeasured = []
    for ax, (metric, what) in zip(axes[0], DEVICE_METRICS):

        def value(rs: list[Run], metric: str = metric) -> float | None:
            vals = [
                v for v in (throughput(r) if metric == "throughput" else r.metric(metric) for r in rs) if v is not None
            ]
            return sum(vals) / len(vals) if vals else None

        bars, labelled = 0, set()
        for i, devs in enumerate(drawn.values()):
            ref = value(devs[base])
            for j, d in enumerate(devices):
                v = value(devs[d]) if d in devs else None
                if v is not None and ref:
                    ax.bar(i + j * width, v / ref, width, label=None if d in labelled else d, color=f"C{j}")
                    labelled.add(d)
                    bars += 1
        if not bars:
            unmeasured.append(what)
            ax.text(
                0.5,
                0.5,
                f"{what}: not measured\n({_reason_of(runs, metric)})",
                transform=ax.transAxes,
                ha="center",
                va="center",
                fontsize=7,
                color="#a33",
                wrap=True,
            )
        ax.set_xticks([i + width * (len(devices) - 1) / 2 for i in range(len(drawn))], labels, fontsize=7)
        ax.set_ylabel(f"{what} / {base}", fontsize=8)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_title(what, fontsize=9)
        if bars:
            ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    left_out = len(comparable) - len(drawn)
    caption = (
        f"Each comparison normalized to {base} (the GPU in the most comparisons)."
        + (f" {left_out} comparison(s) without {base} are not drawn." if left_out else "")
        + (f" Not measured on these runs: {', '.join(unmeasured)}." if unmeasured else "")
    )
    return Figure(key, title, caption, fig)


def memory_breakdown(runs: list[Run]) -> Result:
    key, title = "fig8_memory", "Memory breakdown per mini-batch size (paper Fig. 8)"
    measured = [r for r in runs if r.memory and any(r.memory_bytes(c) for c in MEMORY_CATEGORIES)]
    if not measured:
        reasons = sorted(
            {
                "no memory.json"
                if not r.memory
                else "; ".join(
                    sorted(
                        {
                            str(((r.memory.get("categories") or {}).get(c) or {}).get("reason"))
                            for c in MEMORY_CATEGORIES
                        }
                    )
                )
                for r in runs
            }
        )
        return Missing(key, title, "no run holds a memory breakdown: " + ("; ".join(reasons[:2]) or "no runs"))
    series = by_series(measured)
    fig, axes = _panels(len(series), sharey=True)  # one y-axis for all panels: their bars compare by eye
    top = max(sum((r.memory_bytes(c) or 0) / 2**20 for c in MEMORY_CATEGORIES) for rs in series.values() for r in rs)
    for ax, (s, rs) in zip(axes, series.items()):
        batches = sorted({r.batch_size for r in rs})
        bottom = [0.0] * len(batches)
        for c in MEMORY_CATEGORIES:
            vals = []
            for b in batches:
                r = next(x for x in rs if x.batch_size == b)
                vals.append((r.memory_bytes(c) or 0) / 2**20)
            ax.bar([str(b) for b in batches], vals, bottom=bottom, label=c.replace("_", " "), color=MEMORY_COLORS[c])
            bottom = [x + y for x, y in zip(bottom, vals)]
        ax.set_title(f"{s.model} · {s.framework} {s.precision} · {s.preset}\n{s.device}", fontsize=9)
        ax.set_xlabel("mini-batch size")
        ax.set_ylabel("MiB (all panels)")
        ax.yaxis.set_tick_params(labelleft=True)  # each panel shows the shared scale's numbers
        ax.set_ylim(0, top * 1.35 or 1.0)  # headroom: the legend sits above the bars, never on them
        ax.legend(fontsize=7, ncol=3, loc="upper center")
        # A category no run of this series measured is not a zero: the panel says so.
        unmeasured = [c.replace("_", " ") for c in MEMORY_CATEGORIES if all(r.memory_bytes(c) is None for r in rs)]
        if unmeasured:
            ax.text(
                0.5,
                -0.3,
                "not measured here: " + ", ".join(unmeasured),
                transform=ax.transAxes,
                ha="center",
                va="top",
                fontsize=8,
                color="#a33",
            )
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return Figure(
        key,
        title,
        "Each category's maximum allocated during the run (paper's rule); all panels share one y-axis (MiB); "
        "a category no run of a panel could measure is named under it (drawn as 0) and its reason is in the tables.",
        fig,
    )


# Fig. 9's frameworks: the paper measured ResNet-50 on MXNet and Inception-v3 on TensorFlow; PyTorch is the kit's own.
SCALING_FRAMEWORKS = ("pytorch", "tensorflow", "mxnet")


def scaling(runs: list[Run]) -> Result:
    key, title = "fig9_scaling", "Scaling across workers and machines (paper Fig. 9)"
    multi = [r for r in runs if r.world_size > 1]
    if not multi:
        return Missing(key, title, "no multi-worker run in these results (tbdkit bench --nodes/--gpus-per-node)")
    # A panel per framework, all three always (one without a job says so); in it one line per (model,
    # per-worker batch, one machine or several, link): the paper's Fig. 9 separates GPUs in one
    # machine from machines over a network. Each line's one-worker point is the like single-worker
    # run (same series but the layout).
    groups: dict[tuple, list[Run]] = {}
    for r in multi:
        groups.setdefault(
            (
                r.framework,
                r.model,
                r.batch_size,
                r.nodes > 1,
                r.link_rate or "",
                *r.series.but("model", "framework", "nodes", "gpus_per_node", "link_rate"),
            ),
            [],
        ).append(r)
    singles = {(r.series, r.batch_size): r for r in runs if r.world_size == 1}
    frameworks = [*SCALING_FRAMEWORKS, *sorted({r.framework for r in multi} - set(SCALING_FRAMEWORKS))]
    fig, axes = _panels(len(frameworks))
    units = sorted({r.unit for r in multi if r.unit})
    for ax, framework in zip(axes, frameworks):
        lines = sorted((k, rs) for k, rs in groups.items() if k[0] == framework)
        for (_, model, batch, several, link, *_), rs in lines:
            pts = sorted((r.world_size, r.metric("aggregate_throughput") or throughput(r) or 0.0) for r in rs)
            single = singles.get(
                (rs[0].series._replace(nodes=1, gpus_per_node=1, link_rate="", one_process=False), batch)
            )
            if single is not None:
                pts.insert(0, (1, throughput(single) or 0.0))
            where = (
                "machines (netns)" if several else "one machine" + (", one process" if rs[0].series.one_process else "")
            )
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker="o",
                label=f"{model} b{batch}/worker, {where}" + (f", link {link}" if link else ""),
            )
        if lines:
            ax.legend(fontsize=7)
        else:
            ax.text(
                0.5,
                0.5,
                f"no multi-worker {framework} run",
                ha="center",
                va="center",
                transform=ax.transAxes,
                fontsize=8,
                color="0.4",
            )
        locator = ax.xaxis.get_major_locator()
        if isinstance(locator, MaxNLocator):  # the default AutoLocator is one: whole numbers of workers
            locator.set_params(integer=True)
        ax.set_xlabel("workers")
        ax.set_ylabel("aggregate throughput" + (f" ({', '.join(units)})" if units else ""))
        ax.grid(alpha=0.3)
        ax.set_title(framework, fontsize=10)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return Figure(
        key,
        title,
        "Per-worker mini-batch fixed, global batch grows with the workers (the paper's setup); a panel per framework.",
        fig,
    )


def _curve(run: Run) -> list[tuple[float, float]]:
    """(training seconds, held-out quality) from a converge run's convergence.csv."""
    path = RunDir(run.path).convergence
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return [(float(r["train_s"]), float(r["quality"])) for r in csv.DictReader(fh) if r["quality"] != ""]


def training_curves(runs: list[Run]) -> Result:
    key, title = "fig2_training_curves", "Held-out quality vs training time (paper Fig. 2)"
    curves = [(r, _curve(r)) for r in runs if r.summary.get("preset") == "converge"]
    curves = [(r, c) for r, c in curves if c]
    if not curves:
        return Missing(
            key,
            title,
            "no converge run in these results (`make bench MODEL=resnet50 PRESET=converge` "
            "trains to a quality target and records the curve)",
        )
    models = sorted({r.model for r, _ in curves})
    fig, axes = _panels(len(models))
    for ax, model in zip(axes, models):
        target = None
        for r, c in curves:
            if r.model != model:
                continue
            conv = r.summary.get("convergence") or {}
            target = conv.get("target", target)
            ax.plot(
                [x for x, _ in c],
                [y for _, y in c],
                marker=".",
                label=f"{r.framework} b{r.batch_size} · {r.device_name}",
            )
            ax.set_ylabel(conv.get("quality_metric") or "held-out quality")
        if target is not None:
            ax.axhline(target, linestyle="--", color="grey", linewidth=1, label=f"target {target}")
        ax.set_title(model)
        ax.set_xlabel("training seconds (evaluations excluded)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return Figure(key, title, "Converge preset runs: each point is one held-out evaluation (convergence.csv).", fig)


ALL: tuple[Callable[[list[Run]], Result], ...] = (
    training_curves,
    throughput_vs_batch,
    samples_per_kj_vs_batch,
    gpu_utilization_vs_batch,
    fp32_utilization_vs_batch,
    across_devices,
    memory_breakdown,
    scaling,
)


def draw(runs: list[Run], out_dir: Path) -> list[Result]:
    """Every figure, saved as PNG and SVG under out_dir/figures."""
    out = []
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    for make in ALL:
        result = make(runs)
        if isinstance(result, Figure):
            result.files = {}
            for ext in ("png", "svg"):
                path = out_dir / "figures" / f"{result.key}.{ext}"
                result.figure.savefig(path, dpi=110)
                result.files[ext] = path
            plt.close(result.figure)
        out.append(result)
    return out
