"""tbdkit.results.readers, the one reader of run folders: a relative results folder (the default) read
as typed, every reader's rule for the sample window's iterations, `show last`, and a summary holding a
number no kit writes (NaN, infinity, a non-positive throughput) listed as unreadable by runs, show and report."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from statistics import fmean, stdev

import pytest
from report_fixtures import make_run

from model_checks import cli

from tbdkit.report import build_report
from tbdkit.report import runs as report_runs
from tbdkit.results import readers
from tbdkit.results import summary as summaries
from tbdkit.results.index import Index


def tbdkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`tbdkit ARGS` typed in `cwd` (in this process: the folder it reads is the point)."""
    return cli(*args, cwd=cwd, env={"COLUMNS": "200"})


# ---------------------------------------------------------------- a relative results folder, as typed


def test_a_relative_results_folder_reads_its_own_runs_never_results_results(tmp_path, monkeypatch):
    """The default `results` (and `./results`) from the folder it is in: the index gives each run's path
    once. A results/results/<id> folder (a results folder inside the results folder) is not read instead."""
    monkeypatch.chdir(tmp_path)
    mine = make_run(Path("results"), "deepspeech2", "pytorch", 2, 10.0)
    make_run(Path("results"), "deepspeech2", "pytorch", 4, 18.0, started="2026-11-22T10:00:01")
    decoy = make_run(Path("results") / "results", "resnet50", "mxnet", 8, 99.0)  # same id scheme, other runs
    shutil.copytree(decoy, Path("results") / "results" / mine.name)
    for given in (Path("results"), Path("./results"), tmp_path / "results"):
        loaded = report_runs.load(given)
        assert [(r.model, r.batch_size) for r in loaded] == [("deepspeech2", 2), ("deepspeech2", 4)], given
        assert all(r.path.is_dir() and r.path.parent == given for r in loaded)
    rows = readers.finished(Path("results"))
    assert [files.path for _, files in rows] == [Path("results") / r["run_id"] for r, _ in rows]
    build_report(Path("results"), Path("report"))
    assert "2 run(s)" in Path("report", "report.md").read_text()


def test_tbdkit_report_as_typed_reads_the_default_results_folder(tmp_path):
    """`tbdkit report`, `tbdkit report results` and `tbdkit report ./results` from the folder that holds
    `results/` (what `make report` types)."""
    make_run(tmp_path / "results", "deepspeech2", "pytorch", 2, 10.0)
    for args in ((), ("results",), ("./results",)):
        proc = tbdkit("report", *args, cwd=tmp_path)
        assert proc.returncode == 0, (args, proc.stdout + proc.stderr)
        assert "1 run(s) in 1 group(s)" in proc.stdout, proc.stdout
    assert (tmp_path / "report" / "report.html").is_file()


def test_show_last_is_the_run_that_started_last(tmp_path):
    """`show last`: by start time, not the alphabetically last folder (a `baseline` folder sorts after
    every dated id)."""
    results = tmp_path / "results"
    late = make_run(results, "deepspeech2", "pytorch", 2, 10.0, started="2026-11-23T09:00:00")
    early = make_run(results, "deepspeech2", "pytorch", 4, 10.0, started="2026-11-20T09:00:00")
    early.rename(results / "baseline")
    assert Index(results).find("last") == results / late.name
    proc = tbdkit("show", "last", "-r", "results", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["started_utc"] == "2026-11-23T09:00:00"


# ---------------------------------------------------------------- the sample window, one rule


def _iterations(run: Path, rows: list[tuple[int, str, float, float]]) -> None:
    with (run / "iterations.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["iteration", "phase", "start_s", "seconds", "data_wait_s", "samples", "work", "loss"])
        for i, phase, seconds, work in rows:
            writer.writerow([i, phase, 0, seconds, 0, 2, work, 1.0])


def _with_window(run: Path, first: int, last: int) -> None:
    summary = json.loads((run / "summary.json").read_text())
    summary["window"] = {"first_iteration": first, "last_iteration": last, "iterations": last - first + 1,
                         "seconds": 1.0, "stop_reason": "time_cap"}
    (run / "summary.json").write_text(json.dumps(summary))


def test_every_reader_takes_the_window_by_one_rule(tmp_path):
    """A sweep's per-run CV and compare's estimate read the same iterations: phase 'measure' within the
    summary's first..last iteration (a 'measure' row after it, e.g. a profiled pass, is not in the window)."""
    from tbdkit.analysis import compare
    from tbdkit.bench.sweep import RunResult, SweepRun
    from tbdkit.spec.sweep_spec import parse

    rates = [(0.2, 2.0), (0.21, 2.0), (0.19, 2.0), (0.2, 2.0)]

    def runner(spec, where: Path, probe: bool) -> RunResult:
        run = make_run(where, "deepspeech2", "pytorch", spec.batch_size, 10.0)
        _iterations(run, [(0, "warmup", 5.0, 2.0)] + [(i + 1, "measure", s, w) for i, (s, w) in enumerate(rates)]
                    + [(5, "measure", 50.0, 2.0)])  # after the window
        _with_window(run, 1, 4)
        summary = json.loads((run / "summary.json").read_text())
        return RunResult("ok", run.name, run, summary)

    sweep = parse({"model": "deepspeech2", "frameworks": ["pytorch"], "batches": [2], "precisions": ["fp32"],
                   "device": "cpu", "results": str(tmp_path / "results")})
    state = SweepRun(sweep, runner).run()
    (point,) = state["points"].values()
    expected = [w / s for s, w in rates]
    assert point["window_cv"] == pytest.approx(stdev(expected) / fmean(expected))
    run = tmp_path / "results" / point["run_id"]
    assert readers.window(run, {"first_iteration": 1, "last_iteration": 4}).seconds == [s for s, _ in rates]
    assert compare.load(run).source == "iterations.csv: 4 window iterations"


@pytest.mark.parametrize("seconds, work", [(0.0, 2.0), (-0.2, 2.0), (math.nan, 2.0), (math.inf, 2.0),
                                           (0.2, 0.0), (0.2, -1.0), (0.2, math.nan), (0.2, math.inf)])
def test_a_window_row_that_is_not_a_positive_number_makes_the_window_unreadable(tmp_path, seconds, work):
    from tbdkit.analysis import compare
    from tbdkit.core.errors import UserError

    run = make_run(tmp_path, "deepspeech2", "pytorch", 2, 10.0)
    _iterations(run, [(1, "measure", 0.2, 2.0), (2, "measure", seconds, work), (3, "measure", 0.2, 2.0)])
    _with_window(run, 1, 3)
    with pytest.raises(summaries.Unreadable, match="line 3 of the sample window"):
        readers.window(run)
    assert readers.window_cv(run) is None
    with pytest.raises(UserError, match="no verdict on damaged iterations"):
        compare.load(run)


# ---------------------------------------------------------------- numbers no kit writes


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "-5", "0"])
def test_a_summary_with_a_garbage_throughput_is_unreadable_in_runs_show_and_report(tmp_path, monkeypatch, value):
    from typer.testing import CliRunner

    from tbdkit.cli import app

    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results"
    good = make_run(results, "deepspeech2", "pytorch", 2, 10.0)
    bad = make_run(results, "deepspeech2", "pytorch", 4, 18.0, started="2026-11-22T10:00:01")
    text = (bad / "summary.json").read_text().replace('"value": 18.0', f'"value": {value}', 1)
    (bad / "summary.json").write_text(text)
    runner = CliRunner()
    listed = runner.invoke(app, ["runs", "-r", "results", "--json"])
    assert listed.exit_code == 0 and [r["run_id"] for r in json.loads(listed.stdout)] == [good.name]
    assert f"unreadable: {bad.name}: summary.json" in listed.stderr
    shown = runner.invoke(app, ["show", bad.name, "-r", "results"])
    assert shown.exit_code == 2 and f"unreadable: {bad.name}" in shown.output and shown.exception is not None
    assert isinstance(shown.exception, SystemExit)
    reported = runner.invoke(app, ["report", "results"])
    assert reported.exit_code == 0 and "1 run(s) in 1 group(s)" in reported.stdout
    assert f"unreadable: {bad.name}" in reported.stderr


def test_a_metric_that_is_not_finite_is_written_null_with_the_reason():
    from tbdkit.core.metric import metric

    m = metric(math.inf, "audio_s/s", "sum of work / sum of time")
    assert m["value"] is None and "not a finite number" in m["reason"]


# ---------------------------------------------------------------- the layers


def test_compare_reads_what_a_run_ran_on_without_the_report():
    """analysis (rank 4) no longer reaches up into report (rank 7) to name a GPU."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tbdkit.analysis.compare import Side\n"
        "s = Side(Path('r'), {'device': 'cuda:0'}, {}, {'gpu': {'devices': [{'name': 'NVIDIA H100', 'uuid': 'GPU-1'}]}},"
        " 1.0, 0.1, 3, 'x', 'y')\n"
        "assert s.gpu_product == 'NVIDIA H100', s.gpu_product\n"
        "assert not [m for m in sys.modules if m.startswith('tbdkit.report')], sorted(sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
