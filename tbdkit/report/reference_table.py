"""The committed reference results (workloads/<model>/reference/<b…>/) as one Markdown table.

`tbdkit reference --table` prints it (and `python -m tbdkit.bench.reference --table` or
`python -m tbdkit.report.reference_table` with a GPU machine's own Python); `--readme` writes it into
README.md between the two markers below, so the README's throughput table is always the committed runs,
never typed in. It reads only the run files (summary.json, env.json, memory.json), as the rest of the
report does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tbdkit.core import atomic
from tbdkit.core.errors import UserError, exit_code
from tbdkit.core.paths import KIT_ROOT
from tbdkit.report.runs import Run, load_dirs
from tbdkit.report.tables import fmt, md_table, summary_row, throughput_text

BEGIN = "<!-- reference-table:begin (python -m tbdkit.bench.reference --table --readme) -->"
END = "<!-- reference-table:end -->"
HEADER = [
    "model",
    "batch",
    "precision",
    "device",
    "throughput (95% CI)",
    "GPU util % (NVML)",
    "GPU util % (trace)",
    "SM active % (GPM)",
    "FP32 util % (ncu)",
    "MFU %",
    "CPU util %",
    "peak memory GiB",
    "measured",
]
NONE_YET = (
    "No reference result is committed yet: no GPU has been lent where the kit is developed. "
    "`make reference-suite` on a GPU machine writes them (see above)."
)


def reference_dirs(workloads: Path) -> list[Path]:
    """Each committed reference run's directory: workloads/<model>/reference/<run>/summary.json."""
    return sorted(p.parent for p in workloads.glob("*/reference/*/summary.json"))


def row(r: Run) -> list[str]:
    """One reference run as the table shows it; the values are the report's (tables.summary_row)."""
    v = summary_row(r)
    peak = v["peak_memory_mib"]
    return [
        r.model,
        str(r.batch_size),
        r.precision,
        r.device_name,
        throughput_text(r, v),
        fmt(v["gpu_utilization_pct"]),
        fmt(v["gpu_utilization_trace_pct"]),
        fmt(r.metric("gpm_sm_activity")),
        fmt(v["fp32_utilization_pct"]),
        fmt(v["mfu_pct"]),
        fmt(v["cpu_utilization_pct"]),
        fmt(None if peak is None else peak / 1024),
        str(v["started_utc"] or "")[:10],
    ]


def markdown(workloads: Path) -> str:
    """The table of every committed reference run, by model and batch size; a sentence when there are none."""
    runs = load_dirs(reference_dirs(workloads))
    if not runs:
        return NONE_YET
    runs.sort(key=lambda r: (r.model, r.precision, r.batch_size))
    return md_table(HEADER, [row(r) for r in runs])


def write_readme(readme: Path, table: str) -> None:
    """Replace what stands between the README's markers with `table`."""
    text = readme.read_text()
    if BEGIN not in text or END not in text or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{readme} lacks the reference-table markers ({BEGIN} … {END})")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    atomic.write_text(readme, f"{head}{BEGIN}\n{table}\n{END}{tail}")


def table(root: Path, readme: bool) -> str:
    """The table of root/workloads' reference runs; with readme, also written into root/README.md."""
    text = markdown(root / "workloads")
    if readme:
        try:
            write_readme(root / "README.md", text)
        except ValueError as exc:
            raise UserError(f"{exc}: put the two marker lines back where the table belongs.") from exc
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tbdkit.report.reference_table", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--readme", action="store_true", help="also write it into README.md")
    parser.add_argument("--root", type=Path, default=KIT_ROOT, help="the kit's folder (workloads/, README.md)")
    args = parser.parse_args(argv)
    return exit_code("tbdkit reference", lambda: print(table(args.root, args.readme)))


if __name__ == "__main__":
    sys.exit(main())
