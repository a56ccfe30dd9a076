"""Every model trains its smoke preset through the whole kit (`tbdkit bench`: CLI, agent in the stack's
venv, collectors, analyses, results) on this CPU, and every framework's agent does too; every analysis a CPU
run takes (the memory breakdown, PyTorch's FLOP count) ran on each model and counted something.

Deep Speech 2 is benched on PyTorch by test_as_typed.py (`make kick-the-tires`' smoke run, each run checked whole) and
ResNet-50 on one by test_vision_frameworks.py (its summary read closely) and MiniGo on all three by test_adopt.py (one
table of three, on the adopted stacks; TensorFlow's there is 2.21, the lock's); this benches each of the other models
once, on the framework its [checks] bench_framework names, so that each framework's agent runs two or more of them. What one
more agent run of a model on another framework would add, that framework's adapter stepping that model,
the stack's own tests check in-process
(tests/<stack>/test_every_model_<stack>.py: it learns, each math mode steps, the parameter count), so
the other cells are not benched again here. Needs every stack (`make test`)."""

from __future__ import annotations

import json

import pytest

from model_checks import assert_run_holds_together, tbdkit
from tbdkit.spec import catalog, check_settings
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

COVERED_ELSEWHERE = {"deepspeech2", "resnet50", "minigo", "mlp_numpy"}  # mlp_numpy: the machinery check's own tests
MODELS = sorted(set(catalog.models()) - COVERED_ELSEWHERE)
SHORT = ["--preset", "smoke", "--device", "cpu", "--max-warmup-s", "1", "--max-measure-s", "1"]
# Each of the other models on one of its frameworks ([checks] bench_framework in its workload.toml), each framework's
# agent on three or four of them. Which one follows the cost of a bench beside other tests (a clean clone's `make
# test`): TensorFlow's traces its step first, 71 s for Inception-v3 and over a minute for WGAN-GP, so it takes the
# small networks.
CELLS = [(m, check_settings.bench_framework(catalog.get(m))) for m in MODELS]


def test_each_framework_benches_some_model_here():
    """[checks] bench_framework names a framework the model has, and every framework's agent benches a model here
    (else that agent would run no model of its own through the whole kit)."""
    assert all(f in catalog.get(m).frameworks for m, f in CELLS)
    assert {f for _, f in CELLS} == {"pytorch", "tensorflow", "mxnet"}


@pytest.mark.parametrize("model, framework", CELLS)
def test_smoke_preset_benches(model, framework, tmp_path):
    proc = tbdkit("bench", "--model", model, "--framework", framework, *SHORT, "--results", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (row,) = json.loads(proc.stdout)
    assert row["framework"] == framework and row["model"] == model
    assert row["status"] in MEASURED, row.get("error")
    (run,) = [p for p in tmp_path.iterdir() if (p / "summary.json").is_file()]
    assert_run_holds_together(run, row, model)
    assert_analyses_ran(run, framework)


def assert_analyses_ran(run, framework):
    """Every analysis a CPU run takes ran on this model and counted something (that none failed, every run's
    invariants check): the memory breakdown counted the weights; on PyTorch the FLOP counter counted the step."""
    summary = json.loads((run / "summary.json").read_text())
    memory = json.loads((run / "memory.json").read_text())
    assert memory["categories"]["weights"]["bytes"] > 0, memory["categories"]["weights"]
    flops = summary["metrics"]["model_flops_per_sample"]
    assert (flops["value"] > 0) if framework == "pytorch" else (flops["value"] is None and flops["reason"]), flops
