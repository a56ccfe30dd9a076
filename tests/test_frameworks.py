"""Every framework of a model, side by side: `tbdkit describe`'s errors and one `tbdkit bench --framework all` table
(tests/test_cross_framework.py compares the frameworks' networks and outputs). Needs every stack installed."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
from trace_readers import ARGS, IMPORT_ERRORS, SLICES, hta_parents, perfetto

from model_checks import assert_run_holds_together, tbdkit
from run_invariants import assert_run_holds
from tbdkit.spec import catalog
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

MODEL = catalog.get("deepspeech2")
FRAMEWORKS = list(MODEL.frameworks)




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


def test_bench_all_frameworks_prints_one_table(tmp_path):
    results = tmp_path / "r"
    proc = tbdkit("bench", "--model", "deepspeech2", "--framework", "all", "--preset", "smoke", "--device", "cpu",
                  "--batch", "2", "--max-warmup-s", "1", "--max-measure-s", "2", "--results", str(results), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summaries = json.loads(proc.stdout)  # --json: stdout is only the summaries (progress goes to stderr)
    assert [s["framework"] for s in summaries] == FRAMEWORKS
    for s in summaries:
        assert s["status"] in MEASURED, s
        assert s["model_info"]["parameters"] == summaries[0]["model_info"]["parameters"]
        assert_run_holds_together(results / s["run_id"], s, "deepspeech2")
    envs = {s["framework"]: json.loads((results / s["run_id"] / "env.json").read_text())["framework"]
            for s in summaries}
    assert envs["tensorflow"]["framework_version"] == "2.21.0" and envs["mxnet"]["framework_version"] == "1.9.1"
    assert envs["tensorflow"]["math_mode"]["tf32_matmul"] is False
    assert envs["mxnet"]["math_mode"]["nvidia_tf32_override"] == "0"
    # PyTorch's own analyses after the window (tests/test_bench_cli.py benches the machinery check, which has none):
    # the memory breakdown and the FLOP count, each in an iteration of its own after the window
    assert envs["pytorch"]["framework_version"].startswith("2.") and envs["pytorch"]["math_mode"]["tf32_matmul"] is False
    torch_run = results / summaries[0]["run_id"]
    rows = list(csv.DictReader((torch_run / "iterations.csv").open()))
    after = [r for r in rows if r["phase"] == "analysis"]
    assert len(after) == 2 and rows[-2:] == after
    assert len(rows) == summaries[0]["warmup"]["iterations"] + summaries[0]["window"]["iterations"] + 2
    memory = json.loads((torch_run / "memory.json").read_text())
    assert memory["unit"] == "bytes" and memory["categories"]["feature_maps"]["bytes"] > 0
    torch_metrics = summaries[0]["metrics"]
    assert torch_metrics["model_flops_per_sample"]["value"] > 0 and torch_metrics["mfu"]["value"] is None
    # Each run's files as real tools read them: Perfetto's trace processor (the Perfetto UI's, WebAssembly,
    # in headless Chromium) imports trace.json without an error, and it and HTA find every iteration
    # inside its phase; MLCommons' checker passes mllog.txt but for the rules only a submission meets.
    runs = [results / s["run_id"] for s in summaries]
    for run in runs:
        assert_run_holds(run, indexed=True)
    read = perfetto([run / "trace.json" for run in runs], {"errors": IMPORT_ERRORS, "slices": SLICES, "args": ARGS})
    phases = {"warm-up", "sample window", "analysis"}
    for run in runs:
        got = read[run / "trace.json"]
        assert got["errors"] == [], (run.name, got["errors"])
        assert {s["parent"] for s in got["slices"] if s["name"].startswith("ProfilerStep#")} <= phases, run.name
        assert {s["depth"] for s in got["slices"] if s["name"] in phases} == {0}, run.name
        assert {a["value_type"] for a in got["args"] if a["key"] in ("args.samples", "args.iteration")} == {"int"}
        nested = hta_parents(run / "trace.json")
        assert {nested[name] for name in nested if name.startswith("ProfilerStep#")} <= phases, run.name
        check = subprocess.run([sys.executable, "-m", "tbdkit.results.mllog", str(run / "mllog.txt")],
                               capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr
