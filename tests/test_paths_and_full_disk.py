"""Paths and disks that refuse: a results folder named longer than the file system allows, a dataset
folder whose files cannot be read (/proc), and a disk that fills while `report -o` or `bundle -o`
writes. Each is one sentence with exit code 2, never a traceback, and a full disk leaves no `.tmp`
file and no half figures/ folder behind (the disk is filled with RLIMIT_FSIZE: writing past it fails
with EFBIG as a full disk fails with ENOSPC, and needs no root)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from report_fixtures import make_run

LONG = "r" * 300


def tbdkit(*args: str, cwd: Path, file_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.run([sys.executable, "-m", "tbdkit.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "300"},
                          preexec_fn=limit if file_limit is not None else None)


def _one_sentence(proc: subprocess.CompletedProcess[str], words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: ") and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize("command", [["runs", "-r", LONG], ["show", "last", "-r", LONG], ["report", LONG],
                                     ["bundle", LONG]])
def test_a_results_folder_name_too_long_is_one_sentence(tmp_path, command):
    _one_sentence(tbdkit(*command, cwd=tmp_path), "too long for this file system (a name of 300 bytes")


def test_bench_into_a_results_folder_name_too_long_is_one_sentence(tmp_path):
    proc = tbdkit("bench", "--model", "mlp_numpy", "--framework", "numpy", "--device", "cpu", "--batch", "2",
                  "--results", f"{LONG}/x", cwd=tmp_path)
    _one_sentence(proc, "too long for this file system")


def test_data_prepare_from_a_folder_it_cannot_read_is_one_sentence(tmp_path):
    proc = tbdkit("data", "prepare", "resnet50", "--from", "/proc", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_data_check_names_the_file_it_could_not_read(monkeypatch):
    from tbdkit.core.errors import UserError
    from tbdkit.spec import catalog

    class Refusing:
        @staticmethod
        def check_source(path, hp, full=False):
            raise PermissionError(13, "Permission denied", "/proc/1/cwd")

    monkeypatch.setattr(catalog, "load_module", lambda model, part: Refusing)
    with pytest.raises(UserError, match=r"failed on /proc/1/cwd \(Permission denied\): pass a folder holding"):
        catalog.check_source(catalog.get("resnet50"), "/proc", {}, full=True)


@pytest.fixture
def results(tmp_path):
    out = tmp_path / "results"
    make_run(out, "resnet50", "pytorch", 2, 10.0)
    make_run(out, "resnet50", "pytorch", 4, 18.0, started="2026-11-22T10:00:01")
    run = next(p for p in out.iterdir() if p.is_dir())
    (run / "iterations.csv").write_bytes(os.urandom(600_000).hex().encode())  # 1.2 MB that gzip cannot shrink much
    return out


def test_a_full_disk_under_bundle_leaves_nothing(results, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = tbdkit("bundle", str(results), "-o", str(out / "a.tar.gz"), cwd=tmp_path, file_limit=256 * 1024)
    _one_sentence(proc, "The bundle could not be written to")
    assert list(out.iterdir()) == []


def test_a_full_disk_under_report_leaves_nothing(results, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("kept\n")
    proc = tbdkit("report", str(results), "-o", str(out / "report"), cwd=tmp_path, file_limit=16 * 1024)
    _one_sentence(proc, "The report could not be written to")
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]  # no report/, no .tmp, no half figures/
    whole = tbdkit("report", str(results), "-o", str(out / "report"), cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    first = {p.name for p in (out / "report").iterdir()}
    assert {"report.html", "report.md", "summary.csv", "figures"} <= first
    again = tbdkit("report", str(results), "-o", str(out / "report"), cwd=tmp_path, file_limit=16 * 1024)
    _one_sentence(again, "The report could not be written to")
    assert {p.name for p in (out / "report").iterdir()} == first  # the earlier report stays whole
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt", "report"]


def test_a_full_disk_under_render_leaves_the_folder_as_it_was(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("kept\n")
    proc = tbdkit("render", "--target", "k8s", "--preset", "smoke", "-o", str(out), cwd=tmp_path, file_limit=512)
    _one_sentence(proc, "The launch files could not be written to")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no stage folder left beside it
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]  # no spec.json without its launch file
    whole = tbdkit("render", "--target", "k8s", "--preset", "smoke", "-o", str(out), cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    assert sorted(p.name for p in out.iterdir()) == ["job.yaml", "mine.txt", "results-pvc.yaml", "spec.json"]
