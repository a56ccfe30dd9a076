"""`tbdkit describe`'s errors, one sentence each (tests/test_cross_framework.py compares the frameworks' networks
and outputs; the `tbdkit bench --framework all` table, one row a framework, is benched through the adopted stacks,
tests/test_adopt.py)."""

from __future__ import annotations

import pytest

from model_checks import tbdkit


@pytest.mark.parametrize("args, words", [
    (["deepspeech2", "--framework", "cntk"], ["Unknown framework 'cntk'"]),
    (["deepspeech2", "--preset", "huge"], ["no preset 'huge'", "smoke"]),
    (["alexnet"], ["Unknown model 'alexnet'"]),
])
def test_describe_errors_are_one_sentence(args, words):
    proc = tbdkit("describe", *args)
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr.replace("\n", " ")


def test_describe_without_the_stack_says_how(tmp_path):
    proc = tbdkit("describe", "deepspeech2", "--framework", "mxnet", env={"TBDKIT_VENVS": str(tmp_path)})
    assert proc.returncode == 2 and "tbdkit setup mxnet" in proc.stderr
