"""The kernel timeline: GPU utilization as the paper's eq. 1 (time with at least one kernel
running / elapsed) and the per-kernel table (paper Tables V/VI) from kernel intervals."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# kernel_launches.csv: the traced iterations' kernels by name and launch configuration (grid, block)
LAUNCH_COLUMNS = ("kernel", "launch", "calls", "total_time_us", "method")


@dataclass(frozen=True)
class Kernel:
    name: str
    start_us: float
    duration_us: float
    launch: str = ""  # launch_config(grid, block), "" where the trace does not say


def launch_config(grid: Any, block: Any) -> str:
    """One spelling of a kernel's launch configuration for torch.profiler's trace args (lists
    [x, y, z]) and Nsight Compute's CSV columns (text "(x, y, z)"): 'grid=XxYxZ block=XxYxZ';
    "" when either is missing."""

    def dims(v: Any) -> str | None:
        if isinstance(v, str):
            v = [p for p in v.strip().strip("()[]").replace(" ", "").split(",") if p]
        try:
            got = [int(float(x)) for x in v]
        except (TypeError, ValueError):
            return None
        return "x".join(str(x) for x in got) if len(got) == 3 else None

    g, b = dims(grid), dims(block)
    return f"grid={g} block={b}" if g and b else ""


def chrome_events(doc: Any) -> list[Any]:
    """The events of a Chrome trace as torch.profiler's export_chrome_trace writes it: an object's
    `traceEvents`, or a bare list (the trace's own list, not a copy: a long trace holds 10^5-10^6 events)."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    return events if isinstance(events, list) else []


def from_chrome_trace(doc: dict[str, Any] | list[Any]) -> tuple[list[Kernel], float]:
    """Kernels (complete events of category 'kernel'; memcpy/memset are 'gpu_memcpy'/'gpu_memset')
    and the traced span in microseconds (first event start to last event end, all categories),
    from a Chrome/Perfetto trace as torch.profiler's export_chrome_trace writes it."""
    events = chrome_events(doc)
    spans = [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]
    if not spans:
        return [], 0.0
    start = min(float(e["ts"]) for e in spans)
    end = max(float(e["ts"]) + float(e["dur"]) for e in spans)
    kernels = [
        Kernel(
            str(e.get("name", "")),
            float(e["ts"]) - start,
            float(e["dur"]),
            launch_config((e.get("args") or {}).get("grid"), (e.get("args") or {}).get("block")),
        )
        for e in spans
        if e.get("cat") == "kernel"
    ]
    return kernels, end - start


def busy_time(kernels: Iterable[Kernel]) -> float:
    """Length of the union of the kernels' intervals (overlapping streams count once)."""
    spans = sorted((k.start_us, k.start_us + k.duration_us) for k in kernels if k.duration_us > 0)
    total, cur = 0.0, None  # cur: the (start, end) of the union's current piece
    for start, end in spans:
        if cur is None or start > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = (start, end)
        else:
            cur = (cur[0], max(cur[1], end))
    if cur is not None:
        total += cur[1] - cur[0]
    return total


def utilization(kernels: list[Kernel], elapsed_us: float) -> float:
    """Eq. 1: percentage of the elapsed wall time with at least one kernel running."""
    if elapsed_us <= 0:
        raise ValueError("elapsed time must be positive")
    return 100.0 * busy_time(kernels) / elapsed_us


def kernel_table(kernels: list[Kernel], method: str) -> list[dict[str, Any]]:
    """One row per kernel name, longest total time first; time_share is of the summed kernel time."""
    calls: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    for k in kernels:
        calls[k.name] += 1
        total[k.name] += k.duration_us
    grand = sum(total.values())
    rows = []
    for name in sorted(total, key=lambda n: (-total[n], n)):
        rows.append(
            {
                "kernel": name,
                "calls": calls[name],
                "total_time_us": round(total[name], 3),
                "time_share": round(total[name] / grand, 6) if grand > 0 else 0.0,
                "mean_time_us": round(total[name] / calls[name], 3),
                "fp32_utilization": "",
                "tensor_utilization": "",
                "method": method,
            }
        )
    return rows


def launch_table(kernels: list[Kernel], method: str) -> list[dict[str, Any]]:
    """One row per (kernel name, launch configuration): calls and total time, longest first. This
    is the iteration's kernel timeline that Nsight Compute's per-launch-configuration samples are
    weighted by (tbdkit.analysis.ncu.whole_iteration)."""
    calls: dict[tuple[str, str], int] = defaultdict(int)
    total: dict[tuple[str, str], float] = defaultdict(float)
    for k in kernels:
        calls[(k.name, k.launch)] += 1
        total[(k.name, k.launch)] += k.duration_us
    return [
        {
            "kernel": key[0],
            "launch": key[1],
            "calls": calls[key],
            "total_time_us": round(total[key], 3),
            "method": method,
        }
        for key in sorted(total, key=lambda k: (-total[k], k))
    ]


_CAST = re.compile(r"\((?:unsigned |signed )?[A-Za-z_][\w:]*\)(-?\d+)")  # (cudnnKernelDataType_t)0, (char)1
_QUALIFIER = re.compile(r"(?:<unnamed>|[A-Za-z_]\w*)::")  # cudnn::detail::, at::native::, <unnamed>::
_INT_SUFFIX = re.compile(r"\b(\d+)(?:ull|ll|ul|u|l)\b", re.IGNORECASE)  # 3ul
_WORDS = {"true": "1", "false": "0", "void": "", "const": ""}
_WORD = re.compile(r"\b(true|false|void|const)\b")


def loose_name(kernel: str) -> str:
    """A kernel's name as both profilers spell it: torch.profiler's (CUPTI's names through the C++ ABI's
    demangler) and Nsight Compute's (its own demangler) differ in more than spacing: ncu drops outer
    namespaces (`detail::dgrad_engine` for `cudnn::detail::dgrad_engine`), writes `0` for `false`, `3` for
    `3ul` and `<unnamed>` for `(anonymous namespace)`, puts `const` before the type and omits casts of enum
    template arguments. Kept: the function and its template arguments up to the first parenthesis (the
    parameter list, or a lambda's enclosing function); dropped: namespaces, spaces, `void`, `const`,
    casts and integer suffixes; `true`/`false` read as 1/0."""
    s = _CAST.sub(r"\1", kernel.replace("(anonymous namespace)", "<unnamed>"))
    head = s.split("(")[0] if not s.startswith("(") else s
    head = _WORD.sub(lambda m: _WORDS[m.group(1)], _QUALIFIER.sub("", head))
    return _INT_SUFFIX.sub(r"\1", "".join(head.split()))


def merge_utilization(
    rows: list[dict[str, Any]], per_kernel: dict[str, dict[str, float | None]], method: str
) -> list[dict[str, Any]]:
    """Fill fp32/tensor utilization from Nsight Compute into the table rows of the same kernel name
    (else of the same name up to its parameter list, spaces ignored, where that is unambiguous)."""
    loose: dict[str, list[str]] = defaultdict(list)
    for name in per_kernel:
        loose[loose_name(name)].append(name)
    out = []
    for row in rows:
        got = per_kernel.get(row["kernel"])
        if got is None and len(loose.get(loose_name(row["kernel"]), [])) == 1:
            got = per_kernel[loose[loose_name(row["kernel"])][0]]
        if got is not None:
            row = dict(row)
            for col in ("fp32_utilization", "tensor_utilization"):
                value = got.get(col)
                if value is not None:
                    row[col] = round(float(value), 3)
            row["method"] = f"{row['method']}; {method}"
        out.append(row)
    return out
