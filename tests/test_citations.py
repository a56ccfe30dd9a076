"""Workload files cite the TBD paper where its data are: Table II is the suite overview (models,
layers, datasets); "Table I" and section numbers standing in for it were wrong."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAPER = tomllib.loads((ROOT / "tbdkit" / "report" / "tbd-paper.toml").read_text())
IN_PAPER = sorted(m["name"] for m in PAPER["model"] if m.get("frameworks_paper"))
WORKLOAD_FILES = sorted(p for p in (ROOT / "workloads").rglob("*") if p.suffix in (".toml", ".py"))
ZHU = re.compile(r"Zhu et al\. IISWC 2018([^;\"\n]*)")


def test_every_model_of_the_paper_has_a_workload():
    assert len(IN_PAPER) == 8 and all((ROOT / "workloads" / m / "workload.toml").is_file() for m in IN_PAPER)


@pytest.mark.parametrize("model", IN_PAPER)
def test_paper_models_cite_the_suite_overview_table(model):
    source = tomllib.loads((ROOT / "workloads" / model / "workload.toml").read_text())["model"]["source"]
    assert "Zhu et al. IISWC 2018 Table II" in source, source


@pytest.mark.parametrize("path", WORKLOAD_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_citation_of_the_paper_names_table_one_or_a_section(path):
    for cited in ZHU.findall(path.read_text()):
        assert not re.search(r"\bTable I\b|\bSec(tion)?\.? [IVX]+\b", cited), f"{path}: Zhu et al. IISWC 2018{cited}"
