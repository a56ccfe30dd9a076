"""A value with a newline typed to make (`make bench DATA=<newline>`, RESULTS, REPORT) reaches the kit whole, and
the kit answers it in its one sentence; make's own error (the shell given half a command) was the answer before.
The Makefile runs as typed, from the kit's root, with the kit's environment as it is (-o: never rebuilt) and no
framework stack (TBDKIT_VENVS is empty): each value is refused before anything is installed or written."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from report_fixtures import make_run
from tbdkit.core.paths import KIT_ROOT


def make(*args: str, tmp_path) -> subprocess.CompletedProcess[str]:
    found = shutil.which("make")
    if found is None or not (KIT_ROOT / ".venv" / "bin" / "tbdkit").exists():
        pytest.skip("no make or no kit environment here")
    env = {**os.environ, "TBDKIT_VENVS": str(tmp_path / "no-stacks")}
    env.pop("TBDKIT_RESULTS", None)
    return subprocess.run([found, "-s", "-o", ".venv/.tbdkit-installed", *args], cwd=KIT_ROOT, capture_output=True,
                          text=True, timeout=120, env=env)


def the_kit_s_sentence(proc: subprocess.CompletedProcess[str], words: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "error: " in out and words in " ".join(out.split()), out
    assert "Syntax error" not in out and "Unterminated" not in out and "Traceback" not in out, out


def test_make_bench_with_a_newline_in_data_gets_the_kit_s_sentence(tmp_path):
    the_kit_s_sentence(make("bench", "MODEL=deepspeech2", f"DATA={tmp_path}/a\nb", tmp_path=tmp_path),
                       "is neither 'synthetic' nor an existing path")


def test_make_bench_with_a_newline_in_results_gets_the_kit_s_sentence(tmp_path):
    proc = make("bench", "MODEL=deepspeech2", f"RESULTS={tmp_path}/r\nx", tmp_path=tmp_path)
    the_kit_s_sentence(proc, "holds a control character (a newline, a tab, an escape)")
    assert list(tmp_path.iterdir()) == []


def test_make_report_with_a_newline_in_report_gets_the_kit_s_sentence(tmp_path):
    make_run(tmp_path / "results", "resnet50", "pytorch", 2, 10.0)
    proc = make("report", f"RESULTS={tmp_path}/results", f"REPORT={tmp_path}/rep\nx", tmp_path=tmp_path)
    the_kit_s_sentence(proc, "holds a control character (a newline, a tab, an escape)")
    assert [p.name for p in tmp_path.iterdir()] == ["results"]
