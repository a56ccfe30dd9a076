"""Every model trains its smoke preset through the whole kit (`tbdkit bench`: CLI, agent in the stack's
venv, collectors, analyses, results) on this CPU, and every framework's agent does too.

Deep Speech 2 is benched on all its frameworks by test_frameworks.py (one table of three) and ResNet-50
on one by test_vision_frameworks.py (its summary read closely); this benches each of the other ten models
once, the frameworks taken in turn, so that each framework's agent runs three or four of them. What one more agent run of a model on another framework
would add, that framework's adapter stepping that model, the stack's own tests check in-process
(tests/<stack>/test_every_model_<stack>.py: it learns, each math mode steps, the parameter count), so
the other cells are not benched again here. Needs every stack (`make test`)."""

from __future__ import annotations

import json

import pytest

from model_checks import tbdkit
from tbdkit.spec import catalog
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

COVERED_ELSEWHERE = {"deepspeech2", "resnet50"}
MODELS = sorted(set(catalog.models()) - COVERED_ELSEWHERE)
ORDER = ("pytorch", "tensorflow", "mxnet")
SHORT = ["--preset", "smoke", "--device", "cpu", "--max-warmup-s", "1", "--max-measure-s", "1"]


def in_turn(models: list[str]) -> list[tuple[str, str]]:
    """Each model with one of its frameworks, the frameworks taken in turn (the next one it has)."""
    cells, turn = [], 0
    for model in models:
        have = catalog.get(model).frameworks
        while ORDER[turn % len(ORDER)] not in have:
            turn += 1
        cells.append((model, ORDER[turn % len(ORDER)]))
        turn += 1
    return cells


CELLS = in_turn(MODELS)


def test_each_model_and_each_framework_is_benched_somewhere():
    assert {m for m, _ in CELLS} | COVERED_ELSEWHERE == set(catalog.models())
    assert {f for _, f in CELLS} == set(ORDER)


@pytest.mark.slow
@pytest.mark.parametrize("model, framework", CELLS)
def test_smoke_preset_benches(model, framework, tmp_path):
    proc = tbdkit("bench", "--model", model, "--framework", framework, *SHORT, "--results", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (row,) = json.loads(proc.stdout)
    assert row["framework"] == framework and row["model"] == model
    assert row["status"] in MEASURED, row.get("error")
    assert row["metrics"]["throughput"]["value"] > 0
    assert row["metrics"]["throughput"]["unit"] == catalog.get(model).throughput_unit
    assert row["loss"]["last"] is not None
