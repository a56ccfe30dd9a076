"""tests/run_invariants.py holds every folder of the corpus and refuses a folder broken in each way it checks:
a good real run folder (tests/corpus/) copied and broken once per test, never rerun (each test reads files)."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import corpus_runs
from run_invariants import RunBroken, assert_run_holds

GOOD = "pytorch-standard"


def test_every_run_of_the_corpus_holds():
    for role, name in corpus_runs.roles().items():
        summary = assert_run_holds(corpus_runs.RUNS / name, indexed=False)
        assert summary["run_id"] == name, role


def test_a_run_indexed_as_bench_indexes_it_holds_with_its_row(tmp_path):
    run = corpus_runs.copy(GOOD, tmp_path / "results")
    assert assert_run_holds(run, indexed=True)["status"] == "ok"
    with pytest.raises(RunBroken, match="has no index.sqlite"):
        assert_run_holds(corpus_runs.copy(GOOD, tmp_path / "other", index=False), indexed=True)


# ------------------------------------------------------------------------------------------ the breakages


def _json(path: Path, change: Callable[[dict], None]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _csv(path: Path, change: Callable[[list[dict[str, str]]], list[dict[str, str]]], rename: tuple[str, str] | None = None) -> None:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        columns, rows = list(reader.fieldnames or []), list(reader)
    rows = change(rows)
    if rename:
        columns = [rename[1] if c == rename[0] else c for c in columns]
        rows = [{(rename[1] if k == rename[0] else k): v for k, v in r.items()} for r in rows]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(out.getvalue())


def _scale_throughput(run: Path) -> None:
    def change(s: dict) -> None:
        s["metrics"]["throughput"]["value"] *= 1.01

    _json(run / "summary.json", change)


def _warmup_miscounted(run: Path) -> None:
    _json(run / "summary.json", lambda s: s["warmup"].update(iterations=s["warmup"]["iterations"] + 1))


def _drop_the_last_window_row(run: Path) -> None:
    def change(rows: list[dict[str, str]]) -> list[dict[str, str]]:
        last = max(i for i, r in enumerate(rows) if r["phase"] == "measure")
        return rows[:last] + rows[last + 1:]

    _csv(run / "iterations.csv", change)


def _window_miscounted(run: Path) -> None:
    _json(run / "summary.json", lambda s: s["window"].update(iterations=s["window"]["iterations"] + 1))


def _window_longer(run: Path) -> None:
    _json(run / "summary.json", lambda s: s["window"].update(seconds=s["window"]["seconds"] + 0.001))


def _gap_between_iterations(run: Path) -> None:
    def change(rows: list[dict[str, str]]) -> list[dict[str, str]]:
        rows[-1]["start_s"] = str(float(rows[-1]["start_s"]) + 0.01)
        return rows

    _csv(run / "iterations.csv", change)


def _rename_work(run: Path) -> None:
    _csv(run / "iterations.csv", lambda rows: rows, rename=("work", "works"))


def _metric_without_unit(run: Path) -> None:
    _json(run / "summary.json", lambda s: s["metrics"]["cpu_utilization"].pop("unit"))


def _null_without_reason(run: Path) -> None:
    _json(run / "summary.json", lambda s: s["metrics"]["gpu_utilization"].pop("reason"))


def _failed_reason(name: str, error: Exception) -> str:
    """The reason the agent gives a metric whose analysis raised `error` (its own guard's words)."""
    from tbdkit.agent.after_window import _guard

    def analysis() -> None:
        raise error

    return _guard(name, analysis, lambda reason: reason)


def _flops_analysis_failed(run: Path) -> None:
    reason = _failed_reason("FLOP count", RuntimeError("x"))
    _json(run / "summary.json", lambda s: s["metrics"]["model_flops_per_sample"].update(value=None, reason=reason))


def _memory_analysis_failed(run: Path) -> None:
    reason = _failed_reason("memory", MemoryError())
    _json(run / "memory.json", lambda doc: doc["categories"]["weights"].update(bytes=None, reason=reason))


def _trace_loses_a_slice(run: Path) -> None:
    def change(doc: dict) -> None:
        steps = [e for e in doc["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")]
        doc["traceEvents"].remove(steps[-1])

    _json(run / "trace.json", change)


def _trace_slice_outside_its_span(run: Path) -> None:
    def change(doc: dict) -> None:
        step = next(e for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#1")
        step["dur"] += 10_000_000  # ten seconds past its span's end
    _json(run / "trace.json", change)


def _trace_spans_overlap(run: Path) -> None:
    def change(doc: dict) -> None:
        span = next(e for e in doc["traceEvents"] if e.get("name") == "warm-up")
        span["dur"] += 1_000_000
    _json(run / "trace.json", change)


def _mllog_says_aborted(run: Path) -> None:
    text = (run / "mllog.txt").read_text()
    (run / "mllog.txt").write_text(text.replace('"status": "success"', '"status": "aborted"'))


def _mllog_line_torn(run: Path) -> None:
    lines = (run / "mllog.txt").read_text().splitlines()
    (run / "mllog.txt").write_text("\n".join([*lines[:-1], lines[-1][: len(lines[-1]) // 2]]) + "\n")


def _remove(name: str) -> Callable[[Path], None]:
    return lambda run: (run / name).unlink()


def _garble(name: str) -> Callable[[Path], None]:
    return lambda run: (run / name).write_text('{"torn": ')


def _spec_of_another_batch(run: Path) -> None:
    _json(run / "spec.json", lambda s: s.update(batch_size=s["batch_size"] + 1))


def _failed_without_error(run: Path) -> None:
    _json(run / "summary.json", lambda s: s.update(status="failed", error=None))


def _index_row_differs(run: Path) -> None:
    with sqlite3.connect(run.parent / "index.sqlite") as conn:
        conn.execute("UPDATE runs SET throughput = throughput * 2 WHERE run_id = ?", [run.name])


BREAKAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "no summary": (_remove("summary.json"), "has no summary.json"),
    "summary torn": (_garble("summary.json"), "summary.json is not JSON"),
    "no iterations": (_remove("iterations.csv"), "lacks iterations.csv"),
    "no samples": (_remove("samples.csv"), "lacks samples.csv"),
    "no trace": (_remove("trace.json"), "lacks trace.json"),
    "no env": (_remove("env.json"), "lacks env.json"),
    "no memory breakdown": (_remove("memory.json"), "lacks memory.json"),
    "no mllog": (_remove("mllog.txt"), "lacks mllog.txt"),
    "env torn": (_garble("env.json"), "env.json is not readable JSON"),
    "spec of another run": (_spec_of_another_batch, "spec.json's batch_size"),
    "throughput is not work / seconds": (_scale_throughput, "throughput is .* the window's rows give"),
    "a window row lost": (_drop_the_last_window_row, "numbers its iterations"),
    "window miscounted": (_window_miscounted, "the summary's window has .* iterations"),
    "window's seconds wrong": (_window_longer, "the summary's window lasts"),
    "warm-up miscounted": (_warmup_miscounted, "warm-up has .* iterations"),
    "iterations not back to back": (_gap_between_iterations, "run back to back"),
    "a renamed column": (_rename_work, "lacks the column"),
    "a metric without a unit": (_metric_without_unit, "metric cpu_utilization has no unit"),
    "a null without a reason": (_null_without_reason, "gpu_utilization is null without a reason"),
    "an analysis that failed": (_flops_analysis_failed, "an analysis failed: .*metric model_flops_per_sample"),
    "a memory analysis that failed": (_memory_analysis_failed, "an analysis failed: .*memory category weights"),
    "the trace lost a slice": (_trace_loses_a_slice, "iteration slices"),
    "a slice outside its span": (_trace_slice_outside_its_span, "does not nest"),
    "phase spans overlap": (_trace_spans_overlap, "overlap"),
    "mllog's status is not the run's": (_mllog_says_aborted, "run_stop status is aborted"),
    "mllog line torn": (_mllog_line_torn, "mllog.txt line"),
    "failed without an error": (_failed_without_error, "says no error"),
    "the index row differs": (_index_row_differs, "index.sqlite row differs"),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_a_broken_run_is_refused(breakage, tmp_path):
    run = corpus_runs.copy(GOOD, tmp_path / "results")
    assert_run_holds(run, indexed=True)  # whole before
    breaks, says = BREAKAGES[breakage]
    breaks(run)
    with pytest.raises(RunBroken, match=says):
        assert_run_holds(run, indexed=True)


def _job_aggregate_off(run: Path) -> None:
    _json(run / "summary.json", lambda s: s["metrics"]["aggregate_throughput"]["per_worker"].__setitem__(1, 1e-3))


def _rank_window_off(run: Path) -> None:
    _json(run / "workers" / "rank1" / "summary.json", lambda s: s["window"].update(iterations=99))


def _failed_without_spec(run: Path) -> None:
    (run / "spec.json").unlink()


@pytest.mark.parametrize("role, breaks, says", [
    ("pytorch-data-parallel", _job_aggregate_off, "aggregate_throughput .* is not the sum of its 2 workers'"),
    ("pytorch-data-parallel", _rank_window_off, "rank1: the summary's window has 99 iterations"),
    ("mxnet-disturbed", _scale_throughput, "throughput is .* the window's rows give"),
    ("pytorch-failed", _failed_without_spec, "a failed run lacks spec.json"),
])
def test_a_broken_job_disturbed_or_failed_run_is_refused(role, breaks, says, tmp_path):
    run = corpus_runs.copy(role, tmp_path / "results")
    assert_run_holds(run, indexed=True)
    breaks(run)
    with pytest.raises(RunBroken, match=says):
        assert_run_holds(run, indexed=True)
