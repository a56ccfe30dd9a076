"""The kit's readers over real run folders: the corpus (tests/corpus/, made by real runs of each stack) read by
the index, the tolerant readers, compare, the report, the bundle, reproduce's plan, Holistic Trace Analysis and
MLCommons' log parser and checker. Each test reads files (no run is made); tests/report_fixtures.py's hand-built
folders stay for what a CPU run cannot give (GPU devices and their metrics, clusters, the paper's claims)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import corpus_runs
from run_invariants import assert_run_holds
from tbdkit.results import readers
from tbdkit.results.index import Index, row_of
from tbdkit.results.summary import MEASURED

STANDARD = ("pytorch-standard", "tensorflow-standard", "mxnet-standard")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """Every run of the corpus in one results folder, indexed as `tbdkit bench` indexes its runs."""
    folder = tmp_path_factory.mktemp("corpus") / "results"
    for role in corpus_runs.roles():
        corpus_runs.copy(role, folder)
    return folder


def by_role(results: Path) -> dict[str, Path]:
    return {role: results / name for role, name in corpus_runs.roles().items()}


def summary_of(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


# ---------------------------------------------------------------------------------------------------- index


def test_the_index_lists_every_run_as_its_summary_says(results):
    rows = {r["run_id"]: r for r in Index(results).runs()}
    runs = by_role(results)
    assert set(rows) == {p.name for p in runs.values()}
    for role, run in runs.items():
        assert {k: v for k, v in rows[run.name].items() if k != "path"} == \
            {k: v for k, v in (row_of(run) or {}).items() if k != "path"}, role
        assert_run_holds(run, indexed=True)
    failed = rows[runs["pytorch-failed"].name]
    assert failed["status"] == "failed" and failed["throughput"] is None and "holds no .sgf files" in failed["error"]
    assert rows[runs["mxnet-disturbed"].name]["status"] == "disturbed"
    assert {rows[runs[r].name]["graph"] for r in corpus_runs.roles() if r.endswith("compiled")} == {"compiled"}
    assert rows[runs["pytorch-data-parallel"].name]["world_size"] == 2
    assert {rows[runs[r].name]["precision"] for r in corpus_runs.roles() if r.endswith("bf16")} == {"bf16"}
    last = max(runs.values(), key=lambda p: (summary_of(p)["started_utc"], p.name))
    assert Index(results).find("last") == results / last.name


# ---------------------------------------------------------------------------------------------------- readers


def test_the_readers_read_every_measured_run_and_its_window(results):
    finished = {files.path.name for _, files in readers.finished(results)}
    runs = by_role(results)
    assert finished == {p.name for p in runs.values() if summary_of(p)["status"] in MEASURED}
    for role, run in runs.items():
        files = readers.run(run)
        assert files is not None and files.status == summary_of(run)["status"], role
        if files.status not in MEASURED:
            continue
        assert files.env["framework"]["framework"] == files.summary["framework"] and files.spec["model"] == "minigo"
        window = readers.window(run, files.summary["window"])
        assert len(window) == files.summary["window"]["iterations"] >= 1, role
        own = files.summary["metrics"].get("worker0_throughput") or files.summary["metrics"]["throughput"]
        assert sum(window.works) / sum(window.seconds) == pytest.approx(own["value"], rel=1e-4), role
        assert readers.device_name(files.summary, files.env).startswith("CPU: ")
        if files.summary.get("world_size", 1) == 1:
            assert files.memory is not None and files.memory["unit"] == "bytes", role


# ---------------------------------------------------------------------------------------------------- compare


def test_compare_reads_a_runs_window_and_refuses_unlike_or_unfinished_runs(results, tmp_path):
    from tbdkit.analysis import compare
    from tbdkit.core.errors import UserError

    runs = by_role(results)
    side = compare.load(runs["pytorch-standard"])
    window = summary_of(runs["pytorch-standard"])["window"]
    assert side.source.startswith(f"iterations.csv: {window['iterations']} window iteration")
    assert side.throughput == pytest.approx(summary_of(runs["pytorch-standard"])["metrics"]["throughput"]["value"],
                                            rel=1e-4)
    again = [compare.load(corpus_runs.copy("pytorch-standard", tmp_path / f"again{i}", index=False)) for i in (1, 2)]
    if window["iterations"] >= 2:  # its own noise is known: one run a side
        same = compare.compare(side, again[0])
        assert same.ratio == pytest.approx(1.0) and same.verdict == compare.SAME and same.noise == compare.WITHIN
    else:  # a window of one iteration (a busy machine made the corpus): no verdict from one run a side
        with pytest.raises(UserError, match="its own noise is unknown"):
            compare.compare(side, again[0])
    between = compare.compare(side, again)  # three runs in all: their spread is the noise
    assert between.noise == compare.BETWEEN and between.ratio == pytest.approx(1.0)
    with pytest.raises(UserError, match="not alike .*framework: 'pytorch' vs 'tensorflow'"):
        compare.compare(side, compare.load(runs["tensorflow-standard"]))
    forced = compare.compare([side, *again], compare.load(runs["tensorflow-standard"]), force=True)
    assert ("framework", "pytorch", "tensorflow") in forced.unlike and forced.noise == compare.BETWEEN
    with pytest.raises(UserError, match="ended 'failed', not ok"):
        compare.load(runs["pytorch-failed"])


# ---------------------------------------------------------------------------------------------------- report


def test_the_report_of_the_corpus_has_every_finished_run_and_flags_the_disturbed_one(results, tmp_path):
    from tbdkit.report.build import build

    built = build(results, tmp_path / "report")
    rows = list(csv.DictReader((tmp_path / "report" / "summary.csv").open()))
    measured = {p.name for p in by_role(results).values() if summary_of(p)["status"] in MEASURED}
    assert len(rows) == len(measured) and {r["framework"] for r in rows} == {"pytorch", "tensorflow", "mxnet"}
    assert built.disturbed == 1
    html = built.html.read_text()
    assert "CPU" in html and "minigo" in html.lower()


# ---------------------------------------------------------------------------------------------------- bundle


def test_the_bundle_carries_every_run_file_and_reads_back(results, tmp_path):
    from tbdkit.artifact import bundle as artifact

    manifest = artifact.bundle(results, tmp_path / "a.tar.gz")
    _, files = artifact.read(tmp_path / "a.tar.gz")
    runs = by_role(results)
    assert sorted(manifest["runs"]) == sorted(p.name for p in runs.values()) and manifest["broken_runs"] == []
    for role, run in runs.items():
        kept = {p.name for p in run.iterdir() if p.is_file()}
        carried = {n.split("/", 2)[2] for n in files if n.startswith(f"results/{run.name}/") and n.count("/") == 2}
        assert kept <= carried | {f"{n}.gz" for n in carried}, (role, kept - carried)
    read = {run_id: (files_, why) for run_id, files_, why in readers.bundled(files)}
    assert {run_id for run_id, (_, why) in read.items() if why is None} == {p.name for p in runs.values()}
    guide = files["ARTIFACT.md"].decode()
    for role in STANDARD:
        assert runs[role].name in guide


# ---------------------------------------------------------------------------------------------------- reproduce


def test_reproduce_plans_the_bundled_runs_with_their_recorded_caps_and_wall_times(results, tmp_path, monkeypatch):
    from tbdkit.artifact import bundle as artifact
    from tbdkit.bench import run_list
    from tbdkit.cli.main import app

    asked: list[list] = []
    monkeypatch.setattr(run_list, "run_all", lambda specs, *a, **k: asked.append(specs) or
                        [{"run_id": "new", "status": "ok", "metrics": {}} for _ in specs])
    artifact.bundle(results, tmp_path / "a.tar.gz")
    out = CliRunner().invoke(app, ["reproduce", str(tmp_path / "a.tar.gz"), "--results", str(tmp_path / "new"),
                                   "--yes"], env={"COLUMNS": "300"})
    assert out.exit_code == 0, out.output
    specs = [s for called in asked for s in called]  # run_all is called per group of runs
    finished = [p for p in by_role(results).values() if summary_of(p)["status"] in MEASURED]
    assert sorted((s.framework, s.graph, s.precision, s.world_size) for s in specs) == sorted(
        (summary_of(p)["framework"], summary_of(p)["graph"], summary_of(p)["precision"],
         summary_of(p).get("world_size") or 1) for p in finished)
    assert "warm-up <= 2 s, window <= 3 s" in out.output and f"{len(finished)} run(s), about" in out.output
    assert all(s.measure.max_measure_s == 3.0 and s.model == "minigo" for s in specs)


# ---------------------------------------------------------------------------------------------------- trace, mllog


def test_hta_nests_every_iteration_of_every_run_inside_its_phase():
    from trace_readers import hta_parents

    spans = {"warm-up", "sample window", "analysis", "compile"}
    for role, name in corpus_runs.roles().items():
        trace = corpus_runs.RUNS / name / "trace.json"
        if not trace.is_file():
            assert summary_of(trace.parent)["status"] == "failed", role  # it never reached its loop
            continue
        nested = hta_parents(trace)
        steps = {n: parent for n, parent in nested.items() if n.startswith("ProfilerStep#")}
        rows = list(csv.DictReader((trace.parent / "iterations.csv").open()))
        assert len(steps) == len(rows) and set(steps.values()) <= spans, (role, set(steps.values()))


def test_hta_opens_the_data_parallel_runs_traces_folder():
    from hta.trace_analysis import TraceAnalysis

    job = corpus_runs.run("pytorch-data-parallel")
    analysis = TraceAnalysis(trace_dir=str(job / "traces"))
    assert sorted(analysis.t.get_ranks()) == [0, 1]


def test_every_mllog_parses_and_passes_the_checker_but_for_a_submissions_rules():
    from trace_readers import parse_mllog

    from tbdkit.results import mllog

    for role, name in corpus_runs.roles().items():
        run = corpus_runs.RUNS / name
        got = parse_mllog(run / "mllog.txt")  # MLCommons' own parser: no line it rejects
        summary = summary_of(run)
        assert got["run_stop"]["metadata"]["tbdkit_status"] == summary["status"], role
        if summary["status"] not in MEASURED:
            assert got["run_stop"]["metadata"]["status"] == "aborted"
            continue
        assert got["tbdkit_throughput"]["value"] == summary["metrics"]["throughput"]["value"]
        # the precision of the matrix multiplications, read from the math mode the framework reported
        assert got["lowest_numerical_precision_in_linear"]["value"] == \
            ("bfloat16" if summary["precision"] == "bf16" else "fp32"), role
        assert got["tbdkit_graph"]["value"] == summary["graph"], role
        expected, other = mllog.verdict(mllog.compliance(run / "mllog.txt"))
        assert other == [] and expected == sorted(mllog.SUBMISSION_ONLY), (role, other)
