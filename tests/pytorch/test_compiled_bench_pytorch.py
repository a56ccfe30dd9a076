"""--graph compiled on PyTorch with inductor itself (the generated checks compile with AOTAutograd's
eager backend, tests/model_checks.py): a bench run of a model from outside the kit as a user types it, its
compile phase apart from warm-up and the window, compile_s, the compiler's record; the process's own inductor
cache; bf16 refused on a GPU without bfloat16 tensor cores."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from model_checks import tbdkit
from run_invariants import assert_run_holds

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kit's test model from outside its tree (tests/fixtures/workloads/tiny_mlp: two linear layers, SGD with
    momentum) benched compiled on the CPU, batch 2, short caps: inductor's cost is per graph, and this one has as
    many graphs as a catalog model's step (the step, its graph breaks, the optimizer's state appearing at step 1)
    in a third of MiniGo's CPU time."""
    results = tmp_path_factory.mktemp("compiled") / "results"
    proc = tbdkit("bench", "--workloads", str(TINY), "--model", "tiny_mlp", "--framework", "pytorch", "--device", "cpu",
                  "--preset", "smoke", "--graph", "compiled", "--batch", "2", "--max-warmup-s", "2",
                  "--max-measure-s", "3", "--results", str(results), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run] = [p for p in results.iterdir() if p.is_dir()]
    assert_run_holds(run, indexed=True)
    return run


def test_a_compiled_bench_compiles_apart_from_warm_up_and_the_window(compiled_run):
    assert "-b2-fp32-compiled-" in compiled_run.name
    summary = json.loads((compiled_run / "summary.json").read_text())
    assert summary["status"] in ("ok", "disturbed") and summary["graph"] == "compiled"
    record = summary["compile"]
    assert record["backend"] == "inductor" and record["mode"] == "default" and record["dynamic"] is False
    assert record["compilations"] >= 2 and record["recompilations"] >= 1  # the optimizer's state appears at step 1
    assert record["graph_breaks"] >= 1 and "Unsupported Tensor.backward() call" in record["graph_break_reasons"]
    assert record["compilations_after_compile_phase"] == 0
    with (compiled_run / "iterations.csv").open() as fh:
        phases = [row["phase"] for row in csv.DictReader(fh)]
    compiling = summary["compile_phase"]["iterations"]
    assert phases[:compiling] == ["compile"] * compiling and compiling >= 8  # every batch of the pool
    assert phases[compiling] == "warmup" and "compile" not in phases[compiling:]
    compile_s = summary["metrics"]["compile_s"]
    assert compile_s["unit"] == "s" and 0 < compile_s["value"] <= compile_s["phase_s"]
    assert record["dynamo_compile_s"] > 0.5 * compile_s["value"]  # the compiler's own clock agrees roughly
    env = json.loads((compiled_run / "env.json").read_text())
    assert env["framework"]["graph"] == "compiled" and env["framework"]["compile"]["backend"] == "inductor"


def test_a_compiled_step_uses_a_cache_of_the_process_own(monkeypatch):
    from tbdkit.adapters import pytorch_compile

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setattr(pytorch_compile, "_CACHE", None)
    folder = pytorch_compile.private_cache()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == folder and Path(folder).is_dir()
    assert os.environ["TRITON_CACHE_DIR"].startswith(folder) and "tbdkit-torchinductor-" in folder


def test_dynamic_shapes_follow_the_declared_input_shapes():
    from tbdkit.adapters.pytorch_compile import dynamic_shapes

    assert dynamic_shapes({"input_shapes": "variable"})[0] is True
    assert dynamic_shapes({"input_shapes": "fixed"})[0] is False
    assert "dynamic=False" in dynamic_shapes({"input_shapes": "bucketed"})[1]


class V100Properties:
    """What torch.cuda.get_device_properties says of a V100 (the hardware's answer, no GPU here)."""
    name, major, minor = "Tesla V100-SXM2-16GB", 7, 0


def test_bf16_on_a_gpu_without_bfloat16_is_refused_in_one_sentence(monkeypatch):
    import torch

    from tbdkit.adapters.pytorch import Precision

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: V100Properties())
    with pytest.raises(RuntimeError, match=r"--precision bf16 needs .* Tesla V100-SXM2-16GB is 7\.0: run --precision amp"):
        Precision("bf16", torch.device("cuda:0"))
    cpu = Precision("bf16", torch.device("cpu"))
    assert cpu.describe()["autocast_dtype"] == "bfloat16" and cpu.describe()["grad_scaler"] is False
