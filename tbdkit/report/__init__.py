"""`tbdkit report`: the paper's figures, tables and claim checks, from the results on disk.

The package's modules read only results: runs.py (the runs), figures.py (matplotlib), tables.py,
claims.py, reference_table.py (the committed reference results) and build.py (report.html,
report.md, summary.csv). Importing the package loads none of them, so a GPU machine's bare Python
can print the reference table without matplotlib or jinja2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def build_report(
    results_dir: Path, out_dir: Path, include_disturbed: bool = False, prices: Any = None, with_compiled: bool = False
) -> Path:
    """Write out_dir/report.html, report.md, summary.csv and figures/; return report.html's path."""
    return make_report(results_dir, out_dir, include_disturbed, prices, with_compiled).html


def make_report(
    results_dir: Path, out_dir: Path, include_disturbed: bool = False, prices: Any = None, with_compiled: bool = False
) -> Any:
    """Write out_dir/report.html, report.md, summary.csv and figures/; return what the build computed
    (tbdkit.report.build.Built: report.html's path in out_dir, the claim checks, the grouping).
    `prices` (tbdkit.analysis.cost.Prices) adds the cost table; `with_compiled` draws compiled-graph runs
    in the paper's figures and claims too.

    The report is built in a folder beside out_dir and moved into it whole: a disk that fills (or
    refuses) halfway leaves out_dir as it was, no `.tmp` files and no half figures/ folder, and the
    error is one sentence."""
    from dataclasses import replace

    from tbdkit.report.build import build as build_in
    from tbdkit.results.outputs import staged

    out_dir = Path(out_dir)
    with staged(out_dir, "The report") as stage:
        built = build_in(results_dir, stage, include_disturbed, prices, with_compiled)
    return replace(built, html=out_dir / built.html.relative_to(stage))
