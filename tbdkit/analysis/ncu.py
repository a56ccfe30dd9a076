"""FP32 utilization as the paper defines it (eq. 2) and tensor-pipe utilization per kernel, from
Nsight Compute's raw CSV page (`ncu --import R --csv --page raw --print-units base`).

FP32 FLOPs of a kernel = 2 x FFMA + FADD + FMUL thread instructions executed with their
predicate on (smsp__sass_thread_inst_executed_op_{ffma,fadd,fmul}_pred_on.sum); its FP32
utilization = those FLOPs / (peak FP32 FLOP/s x the kernel's duration, gpu__time_duration.sum).
The run's FP32 utilization is the sum of FLOPs over the sum of durations of the profiled
kernels (the active time T of eq. 2). Tensor-pipe utilization is ncu's
sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active, averaged weighted by duration.

ncu replays each kernel many times, so it profiles a sample: a few launches of each distinct
kernel and launch configuration (`--filter-mode per-launch-config --launch-count N`).
whole_iteration() weights those samples by the full iteration's kernel timeline (calls and time
of each kernel and launch configuration, from torch.profiler), so eq. 2 covers every kernel of
the iteration, and says which share of the kernel time the samples cover.

The kit's command lines for ncu are here too (query_args: the metrics this GPU has, which choose_metrics
keeps of METRICS, naming the reason for each one it drops, so that one unknown metric never fails the whole
pass; profile_args: the pass in front of a process, import_args: its report as the CSV parse_raw_csv reads;
`failure`: why a pass gave no report), so the reference runs
(tbdkit.bench.reference) and the calibration probes (tbdkit.calibrate.flops) run ncu one way; where ncu
is installed is tbdkit.env.nsight's.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tbdkit.analysis.timeline import launch_config, loose_name

FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
FADD = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
FMUL = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"
DURATION = "gpu__time_duration.sum"
TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
METRICS = (FFMA, FADD, FMUL, DURATION, TENSOR)
TIME_UNITS = {
    "nsecond": 1e-9,
    "ns": 1e-9,
    "usecond": 1e-6,
    "us": 1e-6,
    "msecond": 1e-3,
    "ms": 1e-3,
    "second": 1.0,
    "s": 1.0,
}


def profile_args(exe: str, report: Path, launch_count: int, metrics: tuple[str, ...] | None = None) -> list[str]:
    """The kit's ncu command in front of a process: only its cudaProfilerStart/Stop range, the GPU's own
    clocks (ncu never locks them), every process the command starts (ncu forks the agent), `launch_count`
    launches of each kernel and launch configuration, the METRICS above, a report at `report`.ncu-rep."""
    return [
        exe,
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--filter-mode",
        "per-launch-config",
        "--launch-count",
        str(launch_count),
        "--metrics",
        ",".join(metrics or METRICS),
        "--export",
        str(report),
        "--force-overwrite",
    ]


REQUIRED = (FFMA, FADD, FMUL, DURATION)  # eq. 2 needs all four; the tensor-pipe share is measured where it can be


def query_args(exe: str, device_index: int) -> list[str]:
    """ncu's list of the metrics this GPU has (base names: `--query-metrics-mode base`, ncu's default)."""
    return [exe, "--query-metrics", "--devices", str(device_index)]


def parse_query_metrics(text: str) -> set[str]:
    """The metric names of `ncu --query-metrics` output: a `Device ...` line, then a table (dashes, a header
    of Metric Name, Metric Type, Metric Unit, Metric Description, dashes) whose first column is the name;
    a description too long for its column continues on lines whose first column is blank."""
    names: set[str] = set()
    for line in text.splitlines():
        if not line.strip() or line[0].isspace():
            continue
        first = line.split()[0]
        if "__" in first and not first.startswith("-"):
            names.add(first)
    return names


def base_name(metric: str) -> str:
    """A metric's base name, before its rollup and submetric (sm__x.avg.pct_of_peak_sustained_active: sm__x)."""
    return metric.split(".", 1)[0]


def choose_metrics(
    available: set[str] | None, wanted: tuple[str, ...] = METRICS
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The metrics of `wanted` this GPU has (by full or base name, as `--query-metrics` lists them) and the
    reason for each one left out; with `available` None (the query gave no list) all of them, unchecked."""
    if available is None:
        return wanted, {}
    kept = tuple(m for m in wanted if m in available or base_name(m) in available)
    dropped = {
        m: f"ncu --query-metrics does not list {base_name(m)} for this GPU, so the pass leaves it out"
        for m in wanted
        if m not in kept
    }
    return kept, dropped


def import_args(exe: str, rep: Path) -> list[str]:
    """The raw page of a report as CSV (what parse_raw_csv reads), demangled names with their parameter
    lists, as torch.profiler names the kernels."""
    return [
        exe,
        "--import",
        str(rep),
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--print-kernel-base",
        "demangled",
    ]


def failure(exit_code: int, output: str) -> str:
    """Why an ncu pass left no report, from its exit code and the end of its output: the counters'
    permission (ERR_NVGPUCTRPERM) named with its fix, anything else with the output's last lines."""
    tail = output[-400:].replace("\n", " | ")
    if "ERR_NVGPUCTRPERM" in tail:
        return (
            "ERR_NVGPUCTRPERM: this user may not read the GPU performance counters "
            "(run as root, or set NVreg_RestrictProfilingToAdminUsers=0; `tbdkit doctor` says how)"
        )
    return f"the ncu pass failed (exit {exit_code}): {tail}"


@dataclass(frozen=True)
class KernelCounters:
    name: str
    seconds: float
    fp32_flops: float
    tensor_percent: float | None
    launch: str = ""  # timeline.launch_config of its grid and block, "" where the CSV lacks them


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    return float(text)


def parse_raw_csv(text: str) -> list[KernelCounters]:
    """One KernelCounters per profiled kernel launch. Lines before the CSV header (ncu's ==PROF==
    messages) are skipped; the row after the header holds the units."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError('no ncu raw CSV header (a line starting with "ID") in the text')
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(reader)
    units = dict(zip(header, next(reader)))
    missing = [m for m in (FFMA, FADD, FMUL, DURATION) if m not in header]
    if missing:
        raise ValueError(f"the ncu CSV lacks the metrics {missing}")
    scale = TIME_UNITS.get(units.get(DURATION, "nsecond").strip() or "nsecond")
    if scale is None:
        raise ValueError(f"unknown time unit {units.get(DURATION)!r} for {DURATION}")
    out = []
    for row in reader:
        if len(row) < len(header):
            continue
        r = dict(zip(header, row))
        seconds = (_number(r[DURATION]) or 0.0) * scale
        flops = 2 * (_number(r[FFMA]) or 0.0) + (_number(r[FADD]) or 0.0) + (_number(r[FMUL]) or 0.0)
        out.append(
            KernelCounters(
                r["Kernel Name"],
                seconds,
                flops,
                _number(r[TENSOR]) if TENSOR in r else None,
                launch_config(r.get("Grid Size"), r.get("Block Size")),
            )
        )
    return out


def tensor_share(kernels: Iterable[KernelCounters]) -> float | None:
    """The kernels' tensor-pipe utilization %, weighted by each one's duration; None where none has it."""
    timed = [(k.tensor_percent, k.seconds) for k in kernels if k.tensor_percent is not None and k.seconds > 0]
    total = sum(s for _, s in timed)
    return sum(p * s for p, s in timed) / total if total > 0 else None


def per_kernel(kernels: list[KernelCounters], peak_fp32: float) -> dict[str, dict[str, float | None]]:
    """By kernel name: FP32 utilization % (eq. 2 over its launches) and duration-weighted tensor %."""
    flops: dict[str, float] = defaultdict(float)
    secs: dict[str, float] = defaultdict(float)
    tensor: dict[str, float] = defaultdict(float)
    tensor_secs: dict[str, float] = defaultdict(float)
    for k in kernels:
        flops[k.name] += k.fp32_flops
        secs[k.name] += k.seconds
        if k.tensor_percent is not None:
            tensor[k.name] += k.tensor_percent * k.seconds
            tensor_secs[k.name] += k.seconds
    return {
        name: {
            "fp32_utilization": 100.0 * flops[name] / (peak_fp32 * secs[name]) if secs[name] > 0 else None,
            "tensor_utilization": tensor[name] / tensor_secs[name] if tensor_secs[name] > 0 else None,
        }
        for name in secs
    }


def overall(kernels: list[KernelCounters], peak_fp32: float) -> dict[str, Any]:
    """Eq. 2 over all profiled kernels, and the duration-weighted tensor-pipe utilization."""
    seconds = sum(k.seconds for k in kernels)
    if seconds <= 0:
        raise ValueError("the profiled kernels have no duration")
    return {
        "fp32_utilization": 100.0 * sum(k.fp32_flops for k in kernels) / (peak_fp32 * seconds),
        "tensor_utilization": tensor_share(kernels),
        "kernels": len(kernels),
        "active_seconds": seconds,
    }


@dataclass(frozen=True)
class TimelineEntry:
    """The iteration's launches of one kernel in one launch configuration (kernel_launches.csv)."""

    name: str
    launch: str
    calls: int
    seconds: float


class _Samples:
    """The profiled launches by (loose name, launch configuration), and by loose name alone."""

    def __init__(self, kernels: list[KernelCounters]) -> None:
        self.by_launch: dict[tuple[str, str], list[KernelCounters]] = defaultdict(list)
        self.by_name: dict[str, list[KernelCounters]] = defaultdict(list)
        for k in kernels:
            self.by_launch[(loose_name(k.name), k.launch)].append(k)
            self.by_name[loose_name(k.name)].append(k)

    def of(self, entry: TimelineEntry) -> tuple[list[KernelCounters], str]:
        """The samples of this entry's kernel in its launch configuration; where the timeline or the
        CSV does not name the configuration, those of the kernel name if they are all of one."""
        name = loose_name(entry.name)
        if entry.launch and (name, entry.launch) in self.by_launch:
            return self.by_launch[(name, entry.launch)], "launch"
        same = self.by_name.get(name, [])
        if same and len({k.launch for k in same}) == 1 and (not entry.launch or not same[0].launch):
            return same, "name"
        return [], ""


def whole_iteration(
    timeline: Iterable[TimelineEntry], sampled: list[KernelCounters], peak_fp32: float
) -> dict[str, Any]:
    """Eq. 2 over the whole iteration: each timeline entry's FP32 FLOPs are its calls x the mean
    FLOPs per launch of its samples; T is the timeline's kernel time of the entries with samples.
    Returns the overall FP32 and tensor utilization, `coverage` (share of the timeline's kernel
    time whose kernels were sampled), and `per_kernel` by kernel name (paper Tables V/VI) with each
    name's own coverage. Kernels without samples are left out of the figures, never guessed."""
    samples = _Samples(sampled)
    flops_by: dict[str, float] = defaultdict(float)
    secs_by: dict[str, float] = defaultdict(float)
    all_by: dict[str, float] = defaultdict(float)
    tensor_by: dict[str, float] = defaultdict(float)
    tsecs_by: dict[str, float] = defaultdict(float)
    entries = covered = 0
    for e in timeline:
        entries += 1
        all_by[e.name] += e.seconds
        got, _ = samples.of(e)
        if not got or e.seconds <= 0:
            continue
        covered += 1
        flops_by[e.name] += e.calls * sum(k.fp32_flops for k in got) / len(got)
        secs_by[e.name] += e.seconds
        share = tensor_share(got)
        if share is not None:  # the samples' duration-weighted tensor share, applied to the timeline's time
            tensor_by[e.name] += share * e.seconds
            tsecs_by[e.name] += e.seconds
    total = sum(all_by.values())
    active = sum(secs_by.values())
    if total <= 0:
        raise ValueError("the kernel timeline has no kernel time")
    tsec = sum(tsecs_by.values())
    per_kernel = {
        name: {
            "fp32_utilization": 100.0 * flops_by[name] / (peak_fp32 * secs_by[name]) if secs_by[name] > 0 else None,
            "tensor_utilization": tensor_by[name] / tsecs_by[name] if tsecs_by[name] > 0 else None,
            "coverage": secs_by[name] / all_by[name] if all_by[name] > 0 else 0.0,
        }
        for name in all_by
    }
    return {
        "fp32_utilization": 100.0 * sum(flops_by.values()) / (peak_fp32 * active) if active > 0 else None,
        "tensor_utilization": sum(tensor_by.values()) / tsec if tsec > 0 else None,
        "coverage": active / total,
        "active_seconds": active,
        "timeline_seconds": total,
        "timeline_entries": entries,
        "covered_entries": covered,
        "kernels_profiled": len(sampled),
        "per_kernel": per_kernel,
    }
