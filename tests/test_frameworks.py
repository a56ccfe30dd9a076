"""Every framework of a model, side by side: the same network (parity of `tbdkit describe`) and
one `tbdkit bench --framework all` table. Needs every stack installed (`make test` sets them up)."""

from __future__ import annotations

import csv
import itertools
import json
import subprocess
import sys

import pytest
from trace_readers import ARGS, IMPORT_ERRORS, SLICES, hta_parents, perfetto

from framework_parity import (assert_same_network, assert_same_sequence_outputs, assert_smoke_flops, describe_smoke,
                              listed_smoke_state, pytorch_weights_fixture)
from model_checks import assert_run_holds_together, tbdkit
from run_invariants import assert_run_holds
from tbdkit.spec import catalog
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

MODEL = catalog.get("deepspeech2")
FRAMEWORKS = list(MODEL.frameworks)


@pytest.fixture(scope="module")
def described() -> dict[str, dict]:
    return {fw: describe_smoke("deepspeech2", fw) for fw in FRAMEWORKS}


def expected_forward_flops(hp) -> int:
    """Forward FLOPs of one reference sample from the hyperparameters alone (2 per multiply-accumulate)."""
    def out(n, k, s):
        return (n + 2 * (k // 2) - k) // s + 1
    frames = 1 + (round((hp["duration_typical_low_s"] + hp["duration_typical_high_s"]) / 2 * 16000) - 320) // 160
    (k1f, k1t), (k2f, k2t) = hp["conv1_kernel"], hp["conv2_kernel"]
    (s1f, s1t), (s2f, s2t) = hp["conv1_stride"], hp["conv2_stride"]
    c, f1, t1 = hp["conv_channels"], out(hp["frequency_bins"], k1f, s1f), out(frames, k1t, s1t)
    f2, t2 = out(f1, k2f, s2f), out(t1, k2t, s2t)
    macs = c * k1f * k1t * f1 * t1 + c * c * k2f * k2t * f2 * t2
    h, width = hp["rnn_hidden"], c * f2
    for _ in range(hp["rnn_layers"]):
        macs += 2 * t2 * (3 * h * width + 3 * h * h)
        width = 2 * h
    macs += t2 * (2 * h * hp["fc_hidden"] + hp["fc_hidden"] * len(hp["alphabet"]))
    return 2 * macs


@pytest.mark.parametrize("a, b", list(itertools.combinations(FRAMEWORKS, 2)))
def test_the_same_network_on_each_pair(described, a, b):
    assert_same_network(described[a], described[b])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_flops_match_the_hyperparameters(described, framework):
    assert_smoke_flops(described[framework]["flops_per_sample"], expected_forward_flops(MODEL.hp("smoke")))


def test_layer_order_is_canonical(described):
    names = [x["name"] for x in described["pytorch"]["layers"]]
    assert names == ["conv1", "bn1", "conv2", "bn2", "gru1.forward", "gru1.backward", "gru2.forward",
                     "gru2.backward", "dense1", "dense2"]


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


def test_state_differences_are_the_listed_ones(described):
    assert {fw: described[fw]["framework_state"]["non_trainable_state"] for fw in FRAMEWORKS} == \
        listed_smoke_state("deepspeech2")


pytorch_weights = pytorch_weights_fixture("deepspeech2")


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_same_weights_same_outputs(pytorch_weights, tmp_path, framework):
    """PyTorch's weights, moved through the canonical layout into the other framework, give the same
    log-probabilities on the same two utterances: the same network, numerically."""
    assert_same_sequence_outputs("deepspeech2", framework, pytorch_weights, tmp_path / f"{framework}.npz")
