"""The workloads' shared package: one place for what the workload files share, reached through the
import path the catalog sets once (no workload file edits sys.path)."""

import re
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"


def test_no_workload_file_edits_the_import_path() -> None:
    edits = [f"{p.relative_to(WORKLOADS)}:{n}" for p in sorted(WORKLOADS.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bsys\.path\b", line)]
    assert edits == []


def test_the_shared_code_lives_in_one_package() -> None:
    shared = sorted(p.name for p in WORKLOADS.iterdir() if p.is_dir() and p.name.startswith("_"))
    assert shared == ["_shared"], shared
    assert (WORKLOADS / "_shared" / "__init__.py").is_file()
