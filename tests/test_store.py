"""The results index: rows from run folders, and a lost or corrupt index rebuilt from them."""

import json
from pathlib import Path

from tbdkit.results.index import INDEX, Index


def make_run(results, run_id, status="ok", throughput=12.5):
    d = results / run_id
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({
        "run_id": run_id, "status": status, "model": "deepspeech2", "framework": "pytorch", "batch_size": 4,
        "precision": "fp32", "preset": "smoke", "device": "cpu",
        "metrics": {"throughput": {"value": throughput, "unit": "audio_s/s", "ci95_relative": 0.01},
                    "cpu_utilization": {"value": 95.0, "unit": "%"},
                    "gpu_utilization": {"value": None, "unit": "%", "reason": "cpu"}},
    }))
    return d


def test_add_list_find(tmp_path):
    index = Index(tmp_path)
    index.add(make_run(tmp_path, "20260101-000000-a"))
    index.add(make_run(tmp_path, "20260101-000001-b", status="oom", throughput=None))
    rows = index.runs()
    assert [r["run_id"] for r in rows] == ["20260101-000000-a", "20260101-000001-b"]
    assert rows[0]["throughput"] == 12.5 and rows[0]["gpu_utilization"] is None
    assert [r["run_id"] for r in index.runs(status="oom")] == ["20260101-000001-b"]
    assert index.find("last").name == "20260101-000001-b"
    assert index.find("-a").name == "20260101-000000-a"
    assert index.find("20260101") is None  # ambiguous


def test_run_without_summary_is_not_indexed(tmp_path):
    (tmp_path / "20260101-000000-running").mkdir()
    assert Index(tmp_path).runs() == []


def test_lost_and_corrupt_index_are_rebuilt(tmp_path):
    for i in range(3):
        make_run(tmp_path, f"20260101-00000{i}-x")
    index = Index(tmp_path)
    assert len(index.runs()) == 3           # never added: rebuilt from the folders
    (tmp_path / INDEX).unlink()
    assert len(index.runs()) == 3           # lost
    (tmp_path / INDEX).write_bytes(b"this is not sqlite" * 100)
    assert len(index.runs()) == 3           # corrupt
    index.add(make_run(tmp_path, "20260101-000009-y"))
    assert len(index.runs()) == 4


# ---------------------------------------------------------------- damaged summaries, staleness, races, read-only

import multiprocessing
import os
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from tbdkit.cli import app

BAD_SUMMARIES = {
    "a-list": "[1, 2, 3]",
    "b-null": "null",
    "c-types": json.dumps({"status": "ok", "model": "deepspeech2", "framework": "pytorch", "batch_size": "four",
                           "metrics": {"throughput": {"value": "fast"}}}),
    "d-notjson": "{\"status\": ",
    "e-metrics-list": json.dumps({"status": "ok", "model": "m", "framework": "f", "metrics": []}),
}


def _damaged_folder(results):
    make_run(results, "20260101-000000-good")
    for name, text in BAD_SUMMARIES.items():
        (results / name).mkdir()
        (results / name / "summary.json").write_text(text)
    return results


def test_a_damaged_summary_is_listed_unreadable_and_never_fatal(tmp_path):
    results = _damaged_folder(tmp_path / "r")
    index = Index(results)
    assert [r["run_id"] for r in index.runs()] == ["20260101-000000-good"]
    assert [line.split(":")[1].strip() for line in index.unreadable] == list(BAD_SUMMARIES)
    assert all(line.startswith(f"unreadable: {name}: ") for line, name in zip(index.unreadable, BAD_SUMMARIES))
    assert "batch_size" in index.unreadable[2] and "metrics.throughput.value" in index.unreadable[2]
    assert index.rebuild() == 1 and (results / INDEX).is_file()  # the rebuild keeps an index
    runner = CliRunner()
    out = runner.invoke(app, ["runs", "-r", str(results)])
    assert out.exit_code == 0, out.output
    assert "unreadable: a-list: summary.json holds list, not an object" in out.output
    assert "unreadable: b-null: summary.json holds null" in out.output
    assert runner.invoke(app, ["show", "good", "-r", str(results)]).exit_code == 0
    shown = runner.invoke(app, ["show", "c-types", "-r", str(results)])
    assert shown.exit_code == 2, shown.output
    assert "unreadable: c-types: summary.json: batch_size: Input should be a valid integer" in shown.output
    report = runner.invoke(app, ["report", str(results), "-o", str(tmp_path / "rep")])
    assert report.exit_code == 0, (report.output, report.exception)
    assert "unreadable: d-notjson: summary.json is not JSON" in report.output


def test_the_index_follows_the_folder_on_every_read(tmp_path):
    results = tmp_path / "r"
    index = Index(results)
    index.add(make_run(results, "20260101-000000-a"))
    assert [r["run_id"] for r in index.runs()] == ["20260101-000000-a"]
    make_run(results, "20260101-000001-b")  # finished by a CLI killed before it could index it
    assert [r["run_id"] for r in index.runs()] == ["20260101-000000-a", "20260101-000001-b"]
    shutil.copytree(make_run(tmp_path / "elsewhere", "20260101-000002-copied"), results / "20260101-000002-copied")
    assert len(index.runs()) == 3  # a run folder copied in
    shutil.rmtree(results / "20260101-000000-a")
    assert [r["run_id"] for r in index.runs()] == ["20260101-000001-b", "20260101-000002-copied"]
    summary = json.loads((results / "20260101-000001-b" / "summary.json").read_text())
    (results / "20260101-000001-b" / "summary.json").write_text(json.dumps({**summary, "status": "failed"}))
    assert {r["run_id"]: r["status"] for r in index.runs()}["20260101-000001-b"] == "failed"
    # a copied results folder reads its own runs, not the original's
    shutil.copytree(results, tmp_path / "copy")
    shutil.rmtree(results)
    rows = Index(tmp_path / "copy").runs()
    assert {Path(r["path"]).parent for r in rows} == {tmp_path / "copy"}
    assert all(Path(r["path"], "summary.json").is_file() for r in rows)


def _add_many(results, prefix, n):
    index = Index(results)
    for i in range(n):
        index.add(make_run(results, f"20260101-{prefix}{i:04d}"))


def _rebuild_many(results, n):
    for _ in range(n):
        Index(results).rebuild()


def test_a_rebuild_racing_writers_loses_nothing_and_crashes_none(tmp_path):
    results = tmp_path / "r"
    make_run(results, "20260101-000000-first")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_add_many, args=(results, "w", 40)), ctx.Process(target=_rebuild_many, args=(results, 40)),
             ctx.Process(target=_add_many, args=(results, "v", 40))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert len(Index(results).runs()) == 81


def _mount(*args):
    """Run mount(8); skip the test where this machine does not let us (no CAP_SYS_ADMIN)."""
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here")
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mount failed here: {proc.stderr.strip()}")


@pytest.fixture
def read_only_results(tmp_path):
    src, ro = tmp_path / "src", tmp_path / "ro"
    make_run(src, "20260101-000000-a")
    make_run(src, "20260101-000001-b")
    Index(src).runs()
    (src / "20260101-000001-b" / "summary.json").write_text(json.dumps({**json.loads(
        (src / "20260101-000001-b" / "summary.json").read_text()), "status": "oom"}))  # the index is now stale
    make_run(src, "20260101-000002-c")  # and misses a run
    if os.geteuid() != 0:  # permissions hold for anyone but root: a copy without write permission
        shutil.copytree(src, ro)
        paths = [ro, *ro.rglob("*")]
        for path in paths:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield ro
        finally:
            for path in paths:
                path.chmod(0o755 if path.is_dir() else 0o644)
        return
    ro.mkdir()  # root writes through permissions: a read-only bind mount
    _mount("--bind", "-o", "ro", str(src), str(ro))
    try:
        yield ro
    finally:
        subprocess.run(["umount", str(ro)], check=False)


def test_read_only_results_are_read_without_writing(read_only_results, tmp_path):
    ro = read_only_results
    before = sorted(p.name for p in ro.iterdir())
    rows = Index(ro).runs()
    assert [(r["run_id"], r["status"]) for r in rows] == [
        ("20260101-000000-a", "ok"), ("20260101-000001-b", "oom"), ("20260101-000002-c", "ok")]
    runner = CliRunner()
    for args in (["runs", "-r", str(ro)], ["show", "last", "-r", str(ro)],
                 ["report", str(ro), "-o", str(tmp_path / "rep")]):
        out = runner.invoke(app, args)
        assert out.exit_code == 0, (args, out.output, out.exception)
    assert sorted(p.name for p in ro.iterdir()) == before


def test_bench_into_a_read_only_folder_or_a_file_fails_before_training(read_only_results, tmp_path):
    from tbdkit.launch import launch
    from tbdkit.core.errors import UserError
    from tbdkit.spec.run_spec import RunSpec

    spec = RunSpec(model="deepspeech2", batch_size=2, device="cpu", preset="smoke")
    with pytest.raises(UserError, match=r"cannot be written \((it is on read-only storage|Permission denied)\): pass a writable folder"):
        launch(spec, read_only_results, lambda e: None)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="is a file, not a folder"):
        launch(spec, tmp_path / "afile", lambda e: None)
    with pytest.raises(UserError, match="is a file, not a folder"):
        launch(spec, tmp_path / "afile" / "below", lambda e: None)
