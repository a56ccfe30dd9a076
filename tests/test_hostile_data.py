"""Files that would hang a reader or make it recurse without end are one sentence, quickly.

A FIFO named like a dataset's file waits for a writer forever when read (`data prepare` never ended); a
JSON document, a folder tree or a TOML file nested 1,500 deep made Python's readers raise RecursionError.
The workloads' readers walk and read through workloads/_shared/checks.py (regular files only, a bounded
depth), the kit reads its users' TOML through tbdkit/core/user_files.py. Each case runs `tbdkit` as typed,
in a process that a timeout ends if it hangs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from report_fixtures import make_run

DEEP = 1500
TIMEOUT_S = 60


def tbdkit(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tbdkit.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env={**os.environ, **(env or {})})


def one_sentence(proc: subprocess.CompletedProcess[str], words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert proc.stderr.startswith("error: ") and words in " ".join(proc.stderr.split()), proc.stderr


@pytest.fixture
def deep_tree(tmp_path):
    """A folder with DEEP folders nested in it, removed bottom up (a recursive removal would recurse)."""
    root = tmp_path / "data"
    folders = [root]
    for _ in range(DEEP):
        folders.append(folders[-1] / "d")
    for folder in folders:  # os.makedirs recurses
        folder.mkdir()
    yield root
    for folder in reversed(folders):
        folder.rmdir()


@pytest.mark.parametrize(("model", "name"), [("deepspeech2", "19-198.trans.txt"), ("minigo", "game.sgf")])
def test_a_fifo_in_a_dataset_is_named_not_read(tmp_path, model, name):
    folder = tmp_path / "data" / "19" / "198"
    folder.mkdir(parents=True)
    os.mkfifo(folder / name)
    one_sentence(tbdkit("data", "prepare", model, "--from", "data", cwd=tmp_path), f"{name} is a FIFO, not a regular")


@pytest.mark.parametrize("model", ["deepspeech2", "minigo"])
def test_a_folder_tree_1500_deep_is_one_sentence(tmp_path, deep_tree, model):
    one_sentence(tbdkit("data", "prepare", model, "--from", "data", cwd=tmp_path), "has folders nested more than 32")


def test_coco_annotations_nested_1500_deep_are_one_sentence(tmp_path):
    (tmp_path / "coco" / "annotations").mkdir(parents=True)
    (tmp_path / "coco" / "train2017").mkdir()
    (tmp_path / "coco" / "annotations" / "instances_train2017.json").write_text(
        '{"images": ' + "[" * DEEP + "]" * DEEP + ', "annotations": [], "categories": []}')
    one_sentence(tbdkit("data", "prepare", "mask_rcnn", "--from", "coco", cwd=tmp_path),
                 "nests its arrays or objects deeper than a JSON reader follows")


def test_coco_annotations_that_are_a_fifo_are_named_not_read(tmp_path):
    (tmp_path / "coco" / "annotations").mkdir(parents=True)
    (tmp_path / "coco" / "train2017").mkdir()
    os.mkfifo(tmp_path / "coco" / "annotations" / "instances_train2017.json")
    one_sentence(tbdkit("data", "prepare", "mask_rcnn", "--from", "coco", cwd=tmp_path), "is not a regular file")


def _nested_toml(first: str) -> str:
    return first + "x = " + "[" * DEEP + "]" * DEEP + "\n"


def test_a_workload_toml_nested_1500_deep_in_a_workloads_folder_is_one_sentence(tmp_path):
    (tmp_path / "mine" / "deep").mkdir(parents=True)
    (tmp_path / "mine" / "deep" / "workload.toml").write_text(
        _nested_toml('[model]\nname = "deep"\ndominant_layer = "CONV"\n'))
    one_sentence(tbdkit("list", cwd=tmp_path, env={"TBDKIT_WORKLOAD_PATH": "mine"}),
                 "mine/deep/workload.toml nests arrays or tables deeper than a TOML reader can follow")


def test_a_workload_toml_that_is_a_fifo_is_one_sentence(tmp_path):
    (tmp_path / "mine" / "fifo").mkdir(parents=True)
    os.mkfifo(tmp_path / "mine" / "fifo" / "workload.toml")
    one_sentence(tbdkit("list", cwd=tmp_path, env={"TBDKIT_WORKLOAD_PATH": "mine"}),
                 "workload.toml is a FIFO, not a regular file")


def test_a_prices_toml_nested_1500_deep_is_one_sentence(tmp_path):
    make_run(tmp_path / "results", "resnet50", "pytorch", 2, 10.0)
    (tmp_path / "prices.toml").write_text(_nested_toml('given = "2026-11-01"\n[price_per_hour]\ndefault = 2.5\n'))
    one_sentence(tbdkit("report", "results", "-o", "rep", cwd=tmp_path),
                 "prices.toml nests arrays or tables deeper than a TOML reader can follow")
