"""`tbdkit data prepare`: the layout it explains and the folder check it runs with the run's own reader (through
Typer's CliRunner: the reader's answer is the point, not a process)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import soundfile as sf
from PIL import Image

from model_checks import cli, truncated_image


def test_explains_the_layout_without_a_folder():
    proc = cli("data", "prepare", "deepspeech2")
    assert proc.returncode == 0, proc.stderr
    assert "LibriSpeech/<split>/<speaker>/<chapter>" in proc.stdout and "DATA=PATH" in proc.stdout


def test_checks_an_imagenet_folder(tmp_path):
    for wnid in ("n01440764", "n01443537"):
        (tmp_path / wnid).mkdir()
        for i in range(2):
            Image.new("RGB", (40, 30), (i * 90, 20, 200)).save(tmp_path / wnid / f"{wnid}_{i}.JPEG")
    proc = cli("data", "prepare", "resnet50", "--from", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok: ImageNet folder" in proc.stdout and "4 images in 2 classes" in proc.stdout
    assert f"DATA={tmp_path}" in proc.stdout


def test_a_wrong_folder_is_one_sentence_and_exit_2(tmp_path):
    (tmp_path / "notes.txt").write_text("not a dataset")
    for model in ("resnet50", "deepspeech2", "seq2seq"):
        proc = cli("data", "prepare", model, "--from", str(tmp_path))
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2 and "Traceback" not in out and "error:" in out, (model, out)
    proc = cli("data", "prepare", "resnet50", "--from", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "No file or folder" in proc.stderr


# ------------------------------------------------------------------------------------------
# Damaged data: data prepare decodes every file, the check before a run a sample; both name the
# bad file and the fix in one sentence, never a traceback


def _one_sentence_naming(proc: subprocess.CompletedProcess, *words: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out and "error:" in proc.stderr, out
    flat = " ".join(proc.stderr.split())  # the console wraps long lines
    assert all(w in flat for w in words), (words, out)


def test_prepare_names_a_truncated_flac(tmp_path):
    chapter = tmp_path / "19" / "198"
    chapter.mkdir(parents=True)
    for i in range(2):
        sf.write(str(chapter / f"19-198-000{i}.flac"), np.sin(np.arange(16000) / (5 + i)), 16000, format="FLAC")
    (chapter / "19-198.trans.txt").write_text("19-198-0000 HELLO\n19-198-0001 WORLD\n")
    flac = chapter / "19-198-0001.flac"
    flac.write_bytes(flac.read_bytes()[: flac.stat().st_size // 2])
    proc = cli("data", "prepare", "deepspeech2", "--from", str(tmp_path))
    _one_sentence_naming(proc, "19-198-0001.flac cannot be decoded", "remove the line 19-198-0001 from")


def _imagenet_with_a_truncated_jpeg(root):
    (root / "n0").mkdir(parents=True)
    for i in (0, 2):
        Image.new("RGB", (64, 48), (i, 0, 0)).save(root / "n0" / f"{i}.JPEG")
    truncated_image(root / "n0" / "1.JPEG", 64, 48)
    return root


def test_prepare_names_a_truncated_jpeg(tmp_path):
    proc = cli("data", "prepare", "resnet50", "--from", str(_imagenet_with_a_truncated_jpeg(tmp_path)))
    _one_sentence_naming(proc, "1.JPEG cannot be decoded", "move 1.JPEG out of")


def test_the_check_before_bench_names_a_truncated_jpeg_before_training(tmp_path):
    results = tmp_path / "results"
    proc = cli("bench", "-m", "resnet50", "-f", "pytorch", "--device", "cpu", "-r", str(results),
                  "--data", str(_imagenet_with_a_truncated_jpeg(tmp_path / "inet")))
    _one_sentence_naming(proc, "1.JPEG cannot be decoded", "move 1.JPEG out of")
    assert not results.exists()  # nothing ran


def test_prepare_names_broken_coco_json(tmp_path):
    (tmp_path / "annotations").mkdir()
    (tmp_path / "train2017").mkdir()
    json_path = tmp_path / "annotations" / "instances_train2017.json"
    json_path.write_text(json.dumps({"images": [{"id": 1}], "annotations": [{"image_id": 1, "bbox": [0, 0, 4, 4],
                                     "segmentation": [[0, 0, 4, 0, 4, 4]]}], "categories": [{"id": 1}]}))
    proc = cli("data", "prepare", "mask_rcnn", "--from", str(tmp_path))
    _one_sentence_naming(proc, f"{json_path} is not COCO instances JSON", "original file")
    json_path.write_text('{"images": [')
    _one_sentence_naming(cli("data", "prepare", "mask_rcnn", "--from", str(tmp_path)), "cannot parse")


def test_every_reader_takes_the_full_check_that_data_prepare_asks_for():
    """data prepare calls check_source(source, hp, full=True) on every model's reader."""
    import inspect

    from tbdkit.spec import catalog

    for name, model in catalog.models().items():
        params = inspect.signature(catalog.load_module(model, "data").check_source).parameters
        assert "full" in params and params["full"].default is False, name
