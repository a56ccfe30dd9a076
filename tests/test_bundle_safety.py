"""`tbdkit bundle` packs only the files the kit writes into run folders: no dotfiles, no stray
files, nothing through a symbolic link, no index; broken runs are listed, not packed; this
machine's absolute paths and host name are replaced by placeholders; every exclusion is named."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from tbdkit.artifact import bundle as artifact
from tbdkit.results import files as runfiles
from tbdkit.core.errors import UserError
from tbdkit.core.paths import KIT_ROOT


def _run(folder: Path, summary: object = None, spec: object = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps(spec if spec is not None else {"model": "resnet50", "batch_size": 2,
                                                                                "data": "synthetic"}))
    if summary is not False:
        (folder / "summary.json").write_text(json.dumps(summary if summary is not None else
                                                        {"run_id": folder.name, "status": "ok"}))
    return folder


def _results(tmp_path: Path) -> tuple[Path, Path]:
    results = tmp_path / "results"
    good = _run(results / "good")
    host = socket.gethostname()
    (good / "env.json").write_text(json.dumps({"host": {"hostname": host, "cwd": str(results.resolve())},
                                               "kit": {"root": str(KIT_ROOT)}}))
    (good / "log.txt").write_text(f"$ {Path.home()}/venv/bin/python -m tbdkit.agent --spec {results.resolve()}/good/"
                                  f"spec.json --run-dir {results.resolve()}/good\nworkload {KIT_ROOT}/workloads/x.py\n")
    (good / "iterations.csv").write_text("iteration,seconds\n0,0.5\n")
    (good / "workers" / "rank1").mkdir(parents=True)
    (good / "workers" / "rank1" / "summary.json").write_text('{"status": "ok"}')
    (good / "workers" / "node1.log").write_text("node 1\n")
    (good / "workers" / "rank1" / "notes.md").write_text("mine\n")
    # what must never travel
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (good / ".env").write_text("AWS_SECRET_ACCESS_KEY=abc\n")
    (good / "notes.txt").write_text("private\n")
    (good / "keys").symlink_to(secrets, target_is_directory=True)
    (good / "kernels.csv").symlink_to(secrets / "id_rsa")
    (good / "ncu").mkdir()
    (good / "ncu" / "profile.ncu-rep").write_bytes(b"\0" * 10)
    linked_run = _run(tmp_path / "elsewhere")
    (linked_run / "id_rsa").write_text("key\n")
    (results / "linked-run").symlink_to(linked_run, target_is_directory=True)
    (results / ".env").write_text("TOKEN=1\n")
    (results / "index.sqlite").write_bytes(b"SQLite format 3\0")
    _run(results / "no-summary", summary=False)
    _run(results / "list-summary", summary=[1, 2])
    (results / "not-a-run").mkdir()
    probe = _run(results / "sweeps" / "s1" / "probes" / "p1")
    (probe / "id_rsa").write_text("key\n")
    (results / "sweeps" / "s1" / "sweep.json").write_text(json.dumps({"sweep_id": "s1", "results": str(results)}))
    return results, secrets


def test_a_bundle_carries_only_the_kit_files_and_names_what_it_left_out(tmp_path):
    results, _ = _results(tmp_path)
    manifest = artifact.bundle(results, tmp_path / "a.tar.gz")
    _, files = artifact.read(tmp_path / "a.tar.gz")
    assert sorted(n for n in files if n.startswith("results/")) == [
        "results/good/env.json", "results/good/iterations.csv", "results/good/log.txt", "results/good/spec.json",
        "results/good/summary.json", "results/good/workers/node1.log", "results/good/workers/rank1/summary.json",
        "results/sweeps/s1/probes/p1/spec.json", "results/sweeps/s1/probes/p1/summary.json",
        "results/sweeps/s1/sweep.json"]
    assert manifest["runs"] == ["good"] and manifest["sweeps"] == ["s1"]
    excluded = {e["path"]: e["reason"] for e in manifest["excluded"]}
    for path, words in {"good/.env": "hidden", "good/notes.txt": "not a file the kit writes",
                        "good/keys": "symbolic link", "good/kernels.csv": "symbolic link",
                        "good/workers/rank1/notes.md": "not a file the kit writes", "good/ncu/": "Nsight Compute",
                        "linked-run": "symbolic link", ".env": "hidden", "index.sqlite": "index",
                        "sweeps/s1/probes/p1/id_rsa": "not a file the kit writes"}.items():
        assert words in excluded[path], (path, excluded.get(path))
    broken = {b["run"]: b["reason"] for b in manifest["broken_runs"]}
    assert set(broken) == {"no-summary", "list-summary", "not-a-run"}
    assert "no summary.json" in broken["no-summary"] and "list" in broken["list-summary"]
    everything = b"".join(files.values()) + json.dumps(manifest).encode()
    for secret in (b"PRIVATE KEY", b"AWS_SECRET", b"TOKEN=1", b"private\n", str(tmp_path).encode()):
        assert secret not in everything, secret
    assert str(KIT_ROOT).encode() not in everything and f"{Path.home()}/".encode() not in everything


def test_paths_and_host_name_become_placeholders(tmp_path):
    results, _ = _results(tmp_path)
    artifact.bundle(results, tmp_path / "a.tar.gz")
    manifest, files = artifact.read(tmp_path / "a.tar.gz")
    env = json.loads(files["results/good/env.json"])
    assert env == {"host": {"hostname": "<host>", "cwd": "<results>"}, "kit": {"root": "<kit>"}}
    log = files["results/good/log.txt"].decode()
    assert log.startswith("$ ~/venv/bin/python -m tbdkit.agent --spec <results>/good/spec.json --run-dir <results>/good")
    assert "<kit>/workloads/x.py" in log
    assert json.loads(files["results/sweeps/s1/sweep.json"])["results"] == "<results>"
    assert files["results/good/iterations.csv"] == (results / "good" / "iterations.csv").read_bytes()  # nothing to replace
    assert set(manifest["placeholders"]) == {"<results>", "<kit>", "<venvs>", "~", "<host>"}


def test_host_name_in_text_and_json_keys(tmp_path):
    scrub = artifact.Scrubber(tmp_path / "results", host="gpu-node-17")
    assert scrub.text("ssh gpu-node-17: up; gpu-node-170 is another") == "ssh <host>: up; gpu-node-170 is another"
    assert scrub.file("x.csv", b"gpu-node-17,1\n") == b"<host>,1\n"
    assert scrub.file("x.png", b"gpu-node-17") == b"gpu-node-17"  # binary files are not rewritten
    assert artifact.Scrubber(tmp_path, host="ab").text("ab cd") == "ab cd"  # too short to replace safely


def test_the_bundle_command_lists_exclusions_and_broken_runs(tmp_path):
    results, _ = _results(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "bundle", str(results), "-o", str(tmp_path / "b.tgz")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "300"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not packed: run no-summary: no summary.json" in proc.stdout
    assert "left out: good/.env: a hidden file" in proc.stdout and "placeholders" in proc.stdout


def test_run_file_names_are_one_list():
    from pathlib import PurePosixPath as P

    assert {"spec.json", "env.json", "iterations.csv", "samples.csv", "summary.json", "memory.json", "kernels.csv",
            "log.txt"} <= runfiles.RUN_FILES
    assert runfiles.is_run_file(P("workers/rank3/log.txt")) and runfiles.is_run_file(P("workers/node2.log"))
    assert not runfiles.is_run_file(P(".env")) and not runfiles.is_run_file(P("workers/rank1/id_rsa"))
    assert not runfiles.is_run_file(P("workers/x/log.txt")) and not runfiles.is_run_file(P("a/summary.json"))


def test_reproduce_maps_placeholders_back_to_this_machine():
    assert artifact.local_spec({"data": "<kit>/data/x"})["data"] == str(KIT_ROOT / "data" / "x")
    assert artifact.local_spec({"data": "~/d"})["data"] == str(Path.home() / "d")
    assert artifact.local_spec({"data": "synthetic"}) == {"data": "synthetic"}
    ok = b'{"status": "ok", "model": "deepspeech2", "framework": "pytorch"}'  # as the agent writes it
    files = {"results/a/summary.json": b"[]", "results/a/spec.json": b"{}",
             "results/b/summary.json": ok, "results/b/spec.json": b"null",
             "results/c/summary.json": ok, "results/c/spec.json": b'{"data": "~/d"}',
             "results/d/summary.json": b'{"status": "ok"}', "results/d/spec.json": b'{"data": "~/d"}'}
    recorded = artifact.recorded_runs(files)  # d's summary lacks what every summary holds: damaged, not re-run
    assert [(spec, summary["status"], summary["model"]) for spec, summary in recorded] == [
        ({"data": str(Path.home() / "d")}, "ok", "deepspeech2")]


JSON_SHAPES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4), max_leaves=20)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=st.fixed_dictionaries({name: st.binary(max_size=200) | JSON_SHAPES.map(lambda v: json.dumps(v).encode())
                                       for name in ("spec.json", "summary.json", "env.json", "log.txt",
                                                    "iterations.csv")}),
       deep=st.booleans())
def test_any_bytes_in_run_files_give_a_bundle_or_one_sentence(tmp_path, monkeypatch, contents, deep):
    # the report has its own tests; here only what the bundle reads and writes
    monkeypatch.setattr(artifact, "build_report_into", lambda results, out: {"included": False, "reason": "test"})
    results = Path(tempfile.mkdtemp(dir=tmp_path))
    run = results / "run"
    run.mkdir(parents=True)
    for name, data in contents.items():
        (run / name).write_bytes(b"[" * 100_000 if deep and name == "summary.json" else data)
    try:
        manifest = artifact.bundle(results, results / "b.tgz")
    except UserError as exc:
        assert "holds no runs" in str(exc)
    else:
        assert manifest["runs"] == ["run"]
        _, files = artifact.read(results / "b.tgz")
        artifact.recorded_runs(files)


def test_large_traces_travel_compressed_or_are_left_out(tmp_path, monkeypatch):
    """A run's timeline above COMPRESS_ABOVE travels as <name>.gz, one still above LEAVE_OUT_ABOVE compressed
    stays out (both said in the manifest); the bundle reads, its runs reproduce, and a bundle made again
    from its extracted files keeps the compressed trace. (A Deep Speech 2 profile can pass 100 MB.)"""
    import base64
    import gzip
    import hashlib

    monkeypatch.setattr(artifact, "COMPRESS_ABOVE", 4096)
    monkeypatch.setattr(artifact, "LEAVE_OUT_ABOVE", 64 * 1024)
    results = tmp_path / "results"
    run = _run(results / "r1", spec={"model": "resnet50", "framework": "pytorch", "batch_size": 2},
               summary={"run_id": "r1", "status": "ok", "model": "resnet50", "framework": "pytorch", "batch_size": 2})
    small = json.dumps({"traceEvents": []}).encode()
    (run / "trace.json").write_bytes(small)
    profile = json.dumps({"traceEvents": [{"name": "kernel", "ts": i, "dur": 1} for i in range(20_000)]}).encode()
    (run / "profiler_trace.json").write_bytes(profile)
    (run / "workers" / "rank1").mkdir(parents=True)
    noise = json.dumps({"traceEvents": base64.b64encode(os.urandom(300_000)).decode()}).encode()
    (run / "workers" / "rank1" / "profiler_trace.json").write_bytes(noise)
    manifest = artifact.bundle(results, tmp_path / "a.tgz")
    read_manifest, files = artifact.read(tmp_path / "a.tgz")
    assert files["results/r1/trace.json"] == small
    assert "results/r1/profiler_trace.json" not in files
    packed = files["results/r1/profiler_trace.json.gz"]
    assert len(packed) < len(profile) and gzip.decompress(packed) == profile
    assert read_manifest["compressed"] == manifest["compressed"] == {"results/r1/profiler_trace.json.gz": {
        "of": "results/r1/profiler_trace.json", "method": "gzip", "bytes": len(profile),
        "sha256": hashlib.sha256(profile).hexdigest()}}
    left_out = {e["path"]: e["reason"] for e in manifest["excluded"]}["r1/workers/rank1/profiler_trace.json"]
    assert "left out of the bundle" in left_out and "MiB compressed" in left_out
    assert not any("workers/rank1/profiler_trace" in name for name in files)
    assert [summary["run_id"] for _, summary in artifact.recorded_runs(files)] == ["r1"]
    again = tmp_path / "extracted" / "results"
    for name, data in files.items():
        if name.startswith("results/"):
            (again / name.removeprefix("results/")).parent.mkdir(parents=True, exist_ok=True)
            (again / name.removeprefix("results/")).write_bytes(data)
    artifact.bundle(again, tmp_path / "b.tgz")
    _, files_again = artifact.read(tmp_path / "b.tgz")
    assert files_again["results/r1/profiler_trace.json.gz"] == packed
