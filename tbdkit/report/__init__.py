"""`tbdkit report`: the paper's figures, tables and claim checks, from the results on disk.

The package's modules read only results: runs.py (the runs), figures.py (matplotlib), tables.py,
claims.py, reference_table.py (the committed reference results) and build.py (report.html,
report.md, summary.csv). Importing the package loads none of them, so a GPU machine's bare Python
can print the reference table without matplotlib or jinja2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def build_report(results_dir: Path, out_dir: Path, include_disturbed: bool = False, prices: Any = None) -> Path:
    """Write out_dir/report.html, report.md, summary.csv and figures/; return report.html's path.
    `prices` (tbdkit.analysis.cost.Prices) adds the cost table."""
    from tbdkit.report.build import build_report as build

    return build(results_dir, out_dir, include_disturbed, prices)
