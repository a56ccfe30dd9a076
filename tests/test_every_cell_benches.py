"""Every model x framework cell of the support matrix trains its smoke preset through the whole kit
(`tbdkit bench`: CLI, agent in the stack's venv, collectors, analyses, results) on this CPU.
Deep Speech 2 and ResNet-50 are benched on all their frameworks by test_frameworks.py and
test_vision_frameworks.py, A3C, MiniGo and BERT by test_parity_rl.py (with stricter checks of the
summaries); this covers the other seven models. Needs every stack (`make test`)."""

from __future__ import annotations

import json

import pytest

from tbdkit import catalog
from framework_parity import tbdkit
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

COVERED_ELSEWHERE = {"deepspeech2", "resnet50", "a3c", "minigo", "bert"}
MODELS = sorted(set(catalog.models()) - COVERED_ELSEWHERE)
SHORT = ["--preset", "smoke", "--device", "cpu", "--max-warmup-s", "1", "--max-measure-s", "1"]


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_smoke_preset_benches_on_every_framework(model, tmp_path):
    proc = tbdkit("bench", "--model", model, "--framework", "all", *SHORT, "--results", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    assert sorted(r["framework"] for r in rows) == sorted(catalog.get(model).frameworks)
    for row in rows:
        assert row["status"] in MEASURED, row.get("error")
        assert row["metrics"]["throughput"]["value"] > 0
