"""The results index keeps the folders' truth: a row without a run folder is dropped, a value its
summary contradicts is never shown, another process holding the index is waited for a bounded time
with a message, `add` takes one run without scanning, and a sweep opens the index once."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

from typer.testing import CliRunner

from tbdkit.cli import app
from tbdkit.launch.outcome import Outcome
from tbdkit.results import index as index_module
from tbdkit.results.index import INDEX, Index
from tbdkit.spec.sweep_spec import parse

from tests.test_store import make_run


def _indexed(results: Path) -> Index:
    make_run(results, "20260101-000000-a")
    make_run(results, "20260101-000001-b", throughput=1.61)
    index = Index(results)
    assert len(index.runs()) == 2
    return index


def test_a_row_without_a_run_folder_is_never_listed_nor_picked_as_last(tmp_path):
    results = tmp_path / "r"
    _indexed(results)
    with sqlite3.connect(results / INDEX) as conn:  # a row the index holds with no folder behind it
        conn.execute(
            "INSERT INTO runs (run_id, status, model, framework, started_utc, path) VALUES (?, ?, ?, ?, ?, ?)",
            ["20991231-000000-ghost", "ok", "deepspeech2", "pytorch", "2099-12-31T00:00:00Z", "20991231-000000-ghost"],
        )
    assert [r["run_id"] for r in Index(results).runs()] == ["20260101-000000-a", "20260101-000001-b"]
    assert Index(results).find("last").name == "20260101-000001-b"
    shown = CliRunner().invoke(app, ["show", "last", "-r", str(results), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["run_id"] == "20260101-000001-b"


def test_a_forged_index_value_is_never_shown_over_the_summary(tmp_path):
    results = tmp_path / "r"
    _indexed(results)
    with sqlite3.connect(results / INDEX) as conn:  # the index's own layout and stamps kept, one value forged
        conn.execute("UPDATE runs SET throughput = 123456, status = 'ok' WHERE run_id = '20260101-000001-b'")
    rows = {r["run_id"]: r for r in Index(results).runs()}
    assert rows["20260101-000001-b"]["throughput"] == 1.61
    listed = CliRunner().invoke(app, ["runs", "-r", str(results), "--json"])
    assert listed.exit_code == 0, listed.output
    assert [r["throughput"] for r in json.loads(listed.output)] == [12.5, 1.61]
    assert "123456" not in listed.output


def test_a_forged_sweep_row_is_taken_again_from_its_sweep_state(tmp_path):
    results = tmp_path / "r"
    sweep = results / "sweeps" / "s1"
    sweep.mkdir(parents=True)
    state = {"sweep_id": "s1", "points": {"pytorch/fp32/b2/r0": {"status": "ok", "throughput": 2.5}}, "groups": {}}
    (sweep / "sweep.json").write_text(json.dumps(state))
    Index(results).add_sweep(state)
    assert [p["throughput"] for p in Index(results).sweep_points("s1")] == [2.5]
    with sqlite3.connect(results / INDEX) as conn:
        conn.execute("UPDATE sweep_points SET throughput = 99999")
        conn.execute(
            "INSERT INTO sweep_points (sweep_id, point, status, throughput, source) VALUES "
            "('gone', 'x', 'ok', 7.0, 'sweeps/gone')"
        )
    assert [(p["sweep_id"], p["throughput"]) for p in Index(results).sweep_points()] == [("s1", 2.5)]


def _hold(path: Path, held: threading.Event, release: threading.Event) -> None:
    conn = sqlite3.connect(path, timeout=0, check_same_thread=False)
    conn.execute("BEGIN EXCLUSIVE")
    held.set()
    release.wait(30)
    conn.rollback()
    conn.close()


def test_an_index_held_by_another_process_is_waited_for_a_bounded_time_with_a_message(tmp_path, monkeypatch):
    results = tmp_path / "r"
    _indexed(results)
    make_run(results, "20260101-000002-c")  # not yet in the index: the folders are read instead
    monkeypatch.setattr(index_module, "WAIT_S", 1.5)
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold, args=(results / INDEX, held, release))
    holder.start()
    try:
        assert held.wait(10)
        said: list[str] = []
        start = time.monotonic()
        rows = Index(results, notify=said.append).runs()
        took = time.monotonic() - start
        assert [r["run_id"] for r in rows] == ["20260101-000000-a", "20260101-000001-b", "20260101-000002-c"]
        assert took < 8, took
        assert said and "held by another process: waiting up to 1.5 s" in said[0], said
        assert "read from the run folders instead" in said[-1], said
        listed = CliRunner().invoke(app, ["runs", "-r", str(results), "--json"])
        assert listed.exit_code == 0, listed.output
        assert "held by another process" in listed.output and "20260101-000002-c" in listed.output
    finally:
        release.set()
        holder.join(30)
    assert len(Index(results).runs()) == 3  # released: the index is used (and brought up to date) again


def test_add_takes_that_run_only_without_scanning_the_folder(tmp_path, monkeypatch):
    results = tmp_path / "r"
    index = _indexed(results)
    scans: list[Path] = []
    real_scan = index_module.scan
    monkeypatch.setattr(index_module, "scan", lambda r: scans.append(r) or real_scan(r))
    index.add(make_run(results, "20260101-000003-d", throughput=3.0))
    assert scans == []
    with sqlite3.connect(results / INDEX) as conn:
        assert conn.execute("SELECT throughput FROM runs WHERE run_id = '20260101-000003-d'").fetchone() == (3.0,)


def test_a_sweep_of_fifty_points_opens_the_index_once(tmp_path, monkeypatch):
    from tbdkit import launch as launch_module
    from tbdkit.bench import sweep as sweep_module

    spec = parse({"model": "deepspeech2", "frameworks": ["pytorch"], "batches": [2], "precisions": ["fp32"],
                  "device": "cpu", "results": str(tmp_path / "results"), "repeat": 50})
    launched: list[Path] = []

    def fake_launch(run_spec, where, handler, *launcher, **options):  # a finished run folder, no training
        run_dir = make_run(Path(where), f"20260101-{len(launched):06d}-p", throughput=10.0 + len(launched))
        launched.append(run_dir)
        handler({"event": "run_dir", "run_dir": str(run_dir)})
        return Outcome(run_dir, "ok", json.loads((run_dir / "summary.json").read_text()))

    opened: list[Path] = []
    real_open = Index._on_disk

    def counted(self):
        opened.append(self.path)
        return real_open(self)

    monkeypatch.setattr(launch_module, "launch", fake_launch)
    monkeypatch.setattr(Index, "_on_disk", counted)
    state = sweep_module.run_sweep(spec, "audio_s/s", quiet_stdout=True)
    assert len(launched) == 50 and len(state["points"]) == 50
    assert len(opened) == 1, len(opened)
    assert len(Index(spec.results).runs()) == 50
    assert len(Index(spec.results).sweep_points()) == 50
