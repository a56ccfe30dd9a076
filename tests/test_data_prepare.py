"""`tbdkit data prepare`: the layout it explains and the folder check it runs with the run's own reader."""

from __future__ import annotations

import subprocess
import sys

from PIL import Image


def tbdkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tbdkit.cli", *args], capture_output=True, text=True, timeout=120)


def test_explains_the_layout_without_a_folder():
    proc = tbdkit("data", "prepare", "deepspeech2")
    assert proc.returncode == 0, proc.stderr
    assert "LibriSpeech/<split>/<speaker>/<chapter>" in proc.stdout and "DATA=PATH" in proc.stdout


def test_checks_an_imagenet_folder(tmp_path):
    for wnid in ("n01440764", "n01443537"):
        (tmp_path / wnid).mkdir()
        for i in range(2):
            Image.new("RGB", (40, 30), (i * 90, 20, 200)).save(tmp_path / wnid / f"{wnid}_{i}.JPEG")
    proc = tbdkit("data", "prepare", "resnet50", "--from", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok: ImageNet folder" in proc.stdout and "4 images in 2 classes" in proc.stdout
    assert f"DATA={tmp_path}" in proc.stdout


def test_a_wrong_folder_is_one_sentence_and_exit_2(tmp_path):
    (tmp_path / "notes.txt").write_text("not a dataset")
    for model in ("resnet50", "deepspeech2", "seq2seq"):
        proc = tbdkit("data", "prepare", model, "--from", str(tmp_path))
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and "Traceback" not in out and "error:" in out, (model, out)
    proc = tbdkit("data", "prepare", "resnet50", "--from", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "No file or folder" in proc.stderr
