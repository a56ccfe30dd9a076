"""The report's tables: one row per run, the kernel tables (paper Tables V/VI), the environment."""

from __future__ import annotations

from typing import Any

from tbdkit.report.claims import long_kernels_below_average, reference
from tbdkit.report.runs import MEMORY_CATEGORIES, Run, throughput

SUMMARY_COLUMNS = (
    "run_id",
    "model",
    "framework",
    "batch_size",
    "precision",
    "preset",
    "variant",
    "data",
    "device",
    "throughput",
    "throughput_unit",
    "throughput_ci95_relative",
    "gpu_utilization_pct",
    "gpu_utilization_trace_pct",
    "fp32_utilization_pct",
    "tensor_utilization_pct",
    "mfu_pct",
    "cpu_utilization_pct",
    "peak_memory_mib",
    "feature_maps_mib",
    "world_size",
    "math_mode",
    "unstable",
    "unstable_reason",
    "status",
    "disturbed_reasons",
    "started_utc",
)


def fmt(value: Any, digits: int = 3) -> str:
    """`digits` significant digits, whole numbers with thousands separators from 10**digits up
    (2,876, never 2.88e+03); None (not measured) is a dash."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}g}" if abs(value) < 10**digits else f"{value:,.0f}"
    return str(value)


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table; pipes inside cells are escaped."""

    def cell(c: object) -> str:
        return str(c).replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def summary_row(r: Run) -> dict[str, Any]:
    peak = r.peak_memory_bytes
    fm = r.memory_bytes("feature_maps")
    return {
        "run_id": r.run_id,
        "model": r.model,
        "framework": r.framework,
        "batch_size": r.batch_size,
        "precision": r.precision,
        "preset": r.series.preset,
        "variant": r.series.variant,
        "data": r.series.data,
        "device": r.device_name,
        "throughput": throughput(r),
        "throughput_unit": r.unit,
        "throughput_ci95_relative": r.metric_entry("throughput").get("ci95_relative"),
        "gpu_utilization_pct": r.metric("gpu_utilization"),
        "gpu_utilization_trace_pct": r.metric("gpu_utilization_trace"),
        "fp32_utilization_pct": r.metric("fp32_utilization"),
        "tensor_utilization_pct": r.metric("tensor_utilization"),
        "mfu_pct": r.metric("mfu"),
        "cpu_utilization_pct": r.metric("cpu_utilization"),
        "peak_memory_mib": None if peak is None else peak / 2**20,
        "feature_maps_mib": None if fm is None else fm / 2**20,
        "world_size": r.world_size,
        "math_mode": _math_mode(r),
        "unstable": r.unstable,
        "unstable_reason": r.unstable_reason,
        "status": r.summary.get("status"),
        "disturbed_reasons": "; ".join(r.disturbed_reasons) or None,
        "started_utc": r.summary.get("started_utc"),
    }


def _math_mode(r: Run) -> str:
    mode = r.summary.get("math_mode") or (r.env.get("framework") or {}).get("math_mode")
    if isinstance(mode, dict):
        return str(mode.get("mode") or mode.get("name") or ", ".join(f"{k}={v}" for k, v in mode.items()))
    return str(mode or r.precision)


def summary_rows(runs: list[Run]) -> list[dict[str, Any]]:
    return [summary_row(r) for r in runs]


def throughput_text(r: Run, row: dict[str, Any]) -> str:
    """The throughput with its unit and relative 95% CI, from the run's summary_row."""
    ci = row["throughput_ci95_relative"]
    return f"{fmt(row['throughput'])} {r.unit}" + (f" ±{ci:.1%}" if ci else "")


def display_rows(runs: list[Run]) -> list[list[str]]:
    """The per-run table as people read it (units in the header)."""
    rows = []
    for r in runs:
        row = summary_row(r)
        rows.append(
            [
                r.run_id,
                r.model,
                r.framework,
                str(r.batch_size),
                r.precision,
                r.graph,
                r.series.preset,
                r.device_name,
                throughput_text(r, row),
                fmt(row["gpu_utilization_pct"]),
                fmt(row["fp32_utilization_pct"]),
                fmt(row["cpu_utilization_pct"]),
                fmt(row["peak_memory_mib"]),
                ", ".join(_flag_words(r)),
            ]
        )
    return rows


def _flag_words(r: Run) -> list[str]:
    """The Runs table's flag cell: a word per flag (the reasons are in flag_notes, below the table)."""
    return ["disturbed"] * r.disturbed + ["unstable"] * r.unstable + [k for k, _ in _calibration_flags(r)]


def flag_notes(runs: list[Run]) -> list[str]:
    """Below the Runs table: each flagged run's flags with their reasons, one line per run."""
    notes = []
    for r in runs:
        why = (
            ["disturbed: " + ("; ".join(r.disturbed_reasons) or "flagged")] * r.disturbed
            + ["unstable: " + (r.unstable_reason or "flagged")] * r.unstable
            + [f"{k}: {v}" for k, v in _calibration_flags(r)]
        )
        if why:
            notes.append(f"{r.run_id}: " + "; ".join(why))
    return notes


def _calibration_flags(r: Run) -> list[tuple[str, str]]:
    """What `tbdkit calibrate` said of this run's instruments, where it did not trust them: (what, which)."""
    by: dict[str, list[str]] = {}
    for name, status in r.calibration_marks().items():
        by.setdefault({"off": "calibration failed"}.get(status, status), []).append(name)
    return [(k, ", ".join(v)) for k, v in sorted(by.items())]


DISPLAY_HEADER = [
    "run",
    "model",
    "framework",
    "batch",
    "precision",
    "graph",
    "preset",
    "device",
    "throughput (95% CI)",
    "GPU util %",
    "FP32 util %",
    "CPU util %",
    "peak mem MiB",
    "flag",
]


def kernel_tables(runs: list[Run]) -> list[dict[str, Any]]:
    """Per run with a kernel table: the five longest kernels below its average FP32 utilization."""
    out = []
    for r in runs:
        rows = long_kernels_below_average(r)
        if rows:
            out.append(
                {
                    "title": f"{r.model} / {r.framework}, batch {r.batch_size}, {r.device_name}",
                    "average_fp32": rows[0]["average_fp32"],
                    "rows": [[f"{k['time_share']:.2%}", f"{k['fp32_utilization']:.1f}%", k["kernel"]] for k in rows],
                }
            )
    return out


def paper_kernel_tables() -> list[dict[str, Any]]:
    titles = [
        "Paper Table V: ResNet-50, batch 32, TensorFlow (Quadro P4000)",
        "Paper Table VI: ResNet-50, batch 32, MXNet (Quadro P4000)",
    ]
    return [{"title": t, "rows": tbl["rows"]} for t, tbl in zip(titles, reference().get("kernel_table", []))]


def kernel_table_missing(runs: list[Run]) -> str | None:
    if any(r.kernels for r in runs):
        if kernel_tables(runs):
            return None
        return "the kernel tables hold no FP32 utilization (kernels.csv without the Nsight Compute pass)"
    return "no run holds a kernel table (kernels.csv is written by GPU runs with tracing on)"


def memory_rows(runs: list[Run]) -> list[list[str]]:
    rows = []
    for r in runs:
        if not r.memory:
            continue
        cells = []
        for c in MEMORY_CATEGORIES:
            entry = (r.memory.get("categories") or {}).get(c) or {}
            b = r.memory_bytes(c)
            cells.append(f"{b / 2**20:,.1f}" if b is not None else f"— ({entry.get('reason') or 'not measured'})")
        peak = r.peak_memory_bytes
        why = (r.memory.get("peak") or {}).get("reason") or "not measured"
        cells.append(f"{peak / 2**20:,.1f}" if peak is not None else f"— ({why})")
        rows.append([f"{r.model}/{r.framework} b{r.batch_size}"] + cells)
    return rows


MEMORY_HEADER = [
    "run",
    "weights MiB",
    "weight gradients MiB",
    "feature maps MiB",
    "workspace MiB",
    "dynamic MiB",
    "peak MiB",
]


def environment_rows(runs: list[Run]) -> list[list[str]]:
    """GPU, driver, image and digest, framework version and math mode: once per distinct environment."""
    seen: dict[tuple, list[str]] = {}
    for r in runs:
        gpu = r.env.get("gpu") or {}
        fw = r.env.get("framework") or {}
        container = r.env.get("container") or {}
        host = r.env.get("host") or {}
        row = (
            r.device_name,
            str(gpu.get("driver_version") or gpu.get("driver") or ("—" if not gpu.get("available") else "?")),
            str(container.get("image") or host.get("image") or "native (no container)"),
            str(container.get("image_digest") or container.get("image_id") or "—"),
            f"{fw.get('framework') or r.framework} {fw.get('framework_version') or '?'}",
            f"CUDA {fw.get('cuda_runtime')}" if fw.get("cuda_runtime") else "—",
            _math_mode(r),
            str((r.env.get("kit") or {}).get("version") or "?"),
        )
        seen.setdefault(row, []).append(r.run_id)
    return [list(row) + [str(len(ids))] for row, ids in seen.items()]


ENV_HEADER = ["device", "driver", "image", "image digest / id", "framework", "CUDA", "math mode", "kit", "runs"]
