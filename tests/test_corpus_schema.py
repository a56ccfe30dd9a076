"""The corpus (tests/corpus/) is what a run writes today: a fresh smoke run of each stack, made with the corpus'
own spec (tests/corpus/regenerate.py), writes the keys, columns and units of that stack's corpus run; when the
kit changes what it writes, this fails and tests/corpus/regenerate.sh remakes the corpus. The comparison itself
is checked on corpus copies with one thing renamed (cheap); the fresh runs are one bench per stack."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import sys

import pytest

import corpus_runs
from run_invariants import assert_run_holds

STACKS = ("pytorch", "tensorflow", "mxnet")


def _regenerate():
    """tests/corpus/regenerate.py as a module (its spec of each role)."""
    path = corpus_runs.CORPUS / "regenerate.py"
    spec = importlib.util.spec_from_file_location("corpus_regenerate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _rename_column(path, old: str, new: str) -> None:
    rows = list(csv.reader(io.StringIO(path.read_text())))
    rows[0] = [new if c == old else c for c in rows[0]]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path.write_text(out.getvalue())


def test_a_copy_of_a_corpus_run_has_its_schema(tmp_path):
    for role in corpus_runs.roles():
        copy = corpus_runs.copy(role, tmp_path / role, index=False)
        assert corpus_runs.schema_differences(copy, corpus_runs.run(role)) == [], role


def test_a_renamed_column_key_or_unit_is_a_difference(tmp_path):
    corpus = corpus_runs.run("pytorch-standard")
    run = corpus_runs.copy("pytorch-standard", tmp_path / "results", index=False)
    _rename_column(run / "iterations.csv", "work", "work_done")
    (line,) = corpus_runs.schema_differences(run, corpus)
    assert line == "iterations.csv columns: the fresh run adds ['work_done'] and lacks ['work']"
    _rename_column(run / "iterations.csv", "work_done", "work")
    summary = json.loads((run / "summary.json").read_text())
    summary["metrics"]["throughput"]["unit"] = "moves/s"
    summary["wall_seconds"] = summary.pop("wall_s")
    (run / "summary.json").write_text(json.dumps(summary))
    keys, unit = corpus_runs.schema_differences(run, corpus)
    assert unit == "summary.json metric units: (corpus, fresh) {'throughput': ('positions/s', 'moves/s')}"
    assert keys == "summary.json keys: the fresh run adds ['wall_seconds'] and lacks ['wall_s']"
    _rename_column(run / "samples.csv", "cpu_percent", "cpu_pct")
    assert any(d.startswith("samples.csv columns") for d in corpus_runs.schema_differences(run, corpus))


@pytest.mark.parametrize("stack", STACKS)
def test_a_fresh_run_writes_the_corpus_schema(stack, tmp_path):
    from tbdkit.bench.run_list import run_all
    from tbdkit.spec import catalog

    regenerate = _regenerate()
    role = f"{stack}-standard"
    spec = regenerate.spec_of(regenerate.ROLES[role][0], tmp_path)
    results = tmp_path / "results"
    (summary,) = run_all([spec], results, catalog.get(spec.model).throughput_unit, quiet_stdout=True)
    fresh = results / summary["run_id"]
    assert summary["status"] == "ok", summary.get("error")
    differences = corpus_runs.schema_differences(fresh, corpus_runs.run(role))
    assert differences == [], (
        f"{stack}'s runs now write other keys, columns or units than tests/corpus/ holds: if that is meant, remake "
        "the corpus (tests/corpus/regenerate.sh) and update its readers:\n" + "\n".join(differences))
    assert_run_holds(fresh, indexed=True)
