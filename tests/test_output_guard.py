"""-o never writes into a run folder or over a file the kit wrote: `render -o <run>` would replace the
run's spec.json (and `reproduce` re-run the wrong thing), `bundle -o <run>/summary.json` would turn
the summary into a gzip. Each is refused in one sentence and the run stays as it was; writing a new
report, launch folder or bundle, or a bundle over an earlier bundle, still works."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from report_fixtures import make_run
from tbdkit.cli import app


def _fingerprint(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


@pytest.fixture
def results(tmp_path):
    out = tmp_path / "results"
    make_run(out, "resnet50", "pytorch", 2, 10.0)
    return out


@pytest.mark.parametrize("command", [
    ["render", "--target", "slurm", "--preset", "smoke", "-o", "{run}"],
    ["render", "--target", "torchrun", "--preset", "smoke", "-o", "{run}/workers"],
    ["render", "--target", "slurm", "--preset", "smoke", "-o", "{results}"],
    ["report", "{results}", "-o", "{run}"],
    ["report", "{results}", "-o", "{run}/figures"],
    ["report", "{results}", "-o", "{results}"],
    ["bundle", "{results}", "-o", "{run}/summary.json"],
    ["bundle", "{results}", "-o", "{run}/artifact.tar.gz"],
    ["bundle", "{results}", "-o", "{results}/index.sqlite"],
])
def test_output_into_a_run_or_results_folder_is_refused_and_nothing_changes(results, command):
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    before = {p: _fingerprint(p) for p in (results, run)}
    args = [a.format(run=run, results=results) for a in command]
    out = _invoke(*args)
    said = " ".join(out.output.split())  # one sentence, however the console wrapped it
    assert out.exit_code == 2, out.output
    assert said.startswith("error: -o ") and "Traceback" not in said
    assert "run folder" in said or "results folder" in said, said
    assert {p: _fingerprint(p) for p in (results, run)} == before
    assert sorted(p.name for p in run.iterdir()) == sorted(before[run])  # no new file or folder in the run


def test_bundle_replaces_an_earlier_bundle_and_nothing_else(results, tmp_path):
    first = _invoke("bundle", str(results), "-o", str(tmp_path / "a.tgz"))
    assert first.exit_code == 0, first.output
    again = _invoke("bundle", str(results), "-o", str(tmp_path / "a.tgz"))
    assert again.exit_code == 0, again.output
    mine = tmp_path / "notes.txt"
    mine.write_text("mine\n")
    refused = _invoke("bundle", str(results), "-o", str(mine))
    assert refused.exit_code == 2 and "was not written by this command" in " ".join(refused.output.split())
    assert mine.read_text() == "mine\n"
    folder = _invoke("bundle", str(results), "-o", str(tmp_path))
    assert folder.exit_code == 2 and "is a folder" in " ".join(folder.output.split())


def test_render_again_into_its_own_folder_works(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        out = _invoke("render", "--target", "slurm", "--preset", "smoke", "-o", "launch")
        assert out.exit_code == 0, out.output
    assert (tmp_path / "launch" / "spec.json").is_file()
