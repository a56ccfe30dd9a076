"""`tbdkit render -o` takes a folder: a file's name there is refused in one sentence, before anything is written."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tbdkit.cli import app


def _render(out: str):
    return CliRunner().invoke(app, ["render", "--target", "slurm", "--preset", "smoke", "-o", out])


@pytest.mark.parametrize("name", ["job.sbatch", "run.sh", "job.yaml", "compose.YML"])
def test_a_file_like_name_is_refused(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    result = _render(name)
    assert result.exit_code == 2, result.output
    assert "-o takes a folder" in result.output and "Traceback" not in result.output
    assert not (tmp_path / name).exists()


def test_an_existing_file_is_refused_and_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job").write_text("mine\n")
    result = _render("job")
    assert result.exit_code == 2 and "-o takes a folder" in result.output, result.output
    assert (tmp_path / "job").read_text() == "mine\n"


def test_a_folder_gets_the_launch_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _render("out")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "job.sbatch").is_file() and (tmp_path / "out" / "spec.json").is_file()


def test_help_says_out_is_a_folder():
    result = CliRunner().invoke(app, ["render", "--help"], terminal_width=200)
    assert "a folder" in result.output


@pytest.mark.parametrize("batch", ["0", "-1"])
def test_a_batch_below_one_is_refused_before_anything_is_written(tmp_path, monkeypatch, batch):
    """A multi-node job's --batch 0 was taken as "the preset's default" and rendered batch 64."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["render", "--target", "torchrun", "--nodes", "2", "--batch", batch, "-o", "o"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and "a batch size is a whole number from 1" in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", [["bench", "--model", "deepspeech2"], ["sweep", "deepspeech2"]])
def test_bench_and_sweep_refuse_a_batch_of_0_too(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path / "no-stacks"))  # refused before any stack is looked for
    result = CliRunner().invoke(app, [*command, "--device", "cpu", "--batch", "0", "--results", "r"])
    assert result.exit_code == 2 and result.output.startswith("error: "), result.output
    assert "whole number" in result.output and "from 1" in result.output and not (tmp_path / "r").exists()
