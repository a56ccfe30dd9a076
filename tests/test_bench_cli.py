"""`tbdkit bench` end to end on this machine's CPU: real training runs through the native
launcher, their run folders and index, and every error a user can cause.

The runs train the machinery check (`mlp_numpy` on the NumPy stack, the kit's own environment: docs/machinery-check.md):
the CLI, the agent, the collectors and the run folder are what is tested here, in seconds. What is PyTorch's own
(its version and TF32 switch in env.json, memory.json's measured categories and FLOPs after the window) is asserted
on PyTorch's end-to-end run in tests/test_adopt.py."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tbdkit.results.index import Index
from model_checks import ctrl_c_at, tbdkit, tbdkit_command
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

# One framework: with every stack installed, the default is all of them (tests/test_adopt.py).
MODEL = ["--model", "mlp_numpy"]
SHORT = ["--preset", "smoke", "--device", "cpu", "--max-warmup-s", "0.5", "--max-measure-s", "1"]
FAST = ["--framework", "numpy", *SHORT]
RUN_FILES = {"spec.json", "env.json", "iterations.csv", "samples.csv", "summary.json", "log.txt"}


def run_dirs(results: Path) -> list[Path]:
    return sorted(p for p in results.iterdir() if p.is_dir()) if results.exists() else []


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    """One bench for the tests of this module that read a finished run (with --json, whose stdout one
    of them checks; the human table is checked by the --framework all benches of the parity tests)."""
    results = tmp_path_factory.mktemp("results")
    # --price-per-hour is accepted with --json (whose stdout stays JSON); the cost table itself is checked
    # through `tbdkit sweep` (tests/test_cost.py), which prints it with the same function.
    proc = tbdkit("bench", *MODEL, "--batch", "16", *FAST, "--results", str(results), "--json",
                  "--price-per-hour", "2.5")
    return results, proc


def test_bench_writes_a_complete_run(one_run):
    results, proc = one_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    (run,) = run_dirs(results)
    assert RUN_FILES <= {p.name for p in run.iterdir()}
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] in MEASURED and summary["device"] == "cpu" and summary["batch_size"] == 16
    m = summary["metrics"]
    thr = m["throughput"]
    assert thr["unit"] == "samples/s" and thr["value"] > 0 and thr["method"]
    assert thr["ci95_relative"] is not None and thr["ci95_relative"] > 0
    assert m["sample_throughput"]["unit"] == "samples/s" and m["sample_throughput"]["value"] > 0
    assert 0 < m["cpu_utilization"]["value"] <= 100 and "cores" in m["cpu_utilization"]["method"]
    assert m["gpu_utilization"]["value"] is None and "CPU" in m["gpu_utilization"]["reason"]
    assert m["gpu_energy"]["value"] is None and m["gpu_energy"]["reason"]   # never 0: null with the reason
    assert m["peak_rss"]["value"] > 20  # MiB: the agent, its collectors and NumPy
    window, warmup = summary["window"], summary["warmup"]
    assert window["stop_reason"] in {"converged", "time_cap", "iteration_cap"}
    assert warmup["end_reason"] in {"stable", "time_cap", "iteration_cap"}
    # iterations.csv holds both phases; the window's times add up to its length
    rows = list(csv.DictReader((run / "iterations.csv").open()))
    measured = [r for r in rows if r["phase"] == "measure"]
    # no analysis iterations: NumPy has no memory probe or FLOP counter, so nothing steps after the window
    assert [r for r in rows if r["phase"] not in ("warmup", "measure")] == []
    assert len(rows) == warmup["iterations"] + window["iterations"] and len(measured) == window["iterations"]
    memory = json.loads((run / "memory.json").read_text())  # the kit's fallback: weights from the model's arrays
    assert memory["unit"] == "bytes" and memory["categories"]["weights"]["bytes"] == 4 * 2762
    assert memory["categories"]["feature_maps"]["bytes"] is None and memory["categories"]["feature_maps"]["reason"]
    assert m["model_flops_per_sample"]["value"] is None and m["model_flops_per_sample"]["reason"]
    assert m["mfu"]["value"] is None
    seconds = sum(float(r["seconds"]) for r in measured)
    assert seconds == pytest.approx(window["seconds"], rel=1e-3)
    work = sum(float(r["work"]) for r in measured)
    assert thr["value"] == pytest.approx(work / seconds, rel=1e-3)
    env = json.loads((run / "env.json").read_text())
    assert env["framework"]["framework_version"] == np.__version__
    assert env["framework"]["math_mode"]["mode"] == "fp32"
    assert env["seed"] == 0 and env["kit"]["version"] and env["cpu"]["logical_cores"] >= 1
    assert env["gpu"]["available"] is False and env["gpu"]["reason"]
    assert (run / "samples.csv").read_text().startswith("t_s,")
    assert "phase" in (run / "log.txt").read_text()


def test_bench_writes_a_trace_and_an_mllog(one_run):
    from trace_readers import hta_frame, parse_mllog

    results, _ = one_run
    (run,) = run_dirs(results)
    df = hta_frame(run / "trace.json")  # read by Holistic Trace Analysis: the iterations on iterations.csv's clock
    rows = list(csv.DictReader((run / "iterations.csv").open()))
    starts = sorted(df[df["name_text"].str.startswith("ProfilerStep#")]["ts"])
    assert starts == pytest.approx([float(r["start_s"]) * 1e6 for r in rows], abs=1)
    assert {"warm-up", "sample window"} <= set(df["name_text"])
    counters = {e["name"] for e in json.loads((run / "trace.json").read_text())["traceEvents"] if e["ph"] == "C"}
    assert {"cpu_percent", "rss_mib", "data wait share"} <= counters
    assert isinstance(json.loads((run / "summary.json").read_text())["window"]["samples_origin_s"], float)
    assert parse_mllog(run / "mllog.txt")["run_stop"]["metadata"]["status"] == "success"
    shown = tbdkit("show", run.name, "--results", str(results), "--trace")
    assert shown.returncode == 0 and str(run / "trace.json") in shown.stdout.replace("\n", "")
    assert "ui.perfetto.dev" in shown.stdout


def test_runs_and_show(one_run):
    results, _ = one_run
    (run,) = run_dirs(results)
    listing = tbdkit("runs", "--results", str(results), "--json")
    rows = json.loads(listing.stdout)
    assert [r["run_id"] for r in rows] == [run.name] and rows[0]["status"] in MEASURED
    (results / "index.sqlite").unlink()
    assert json.loads(tbdkit("runs", "--results", str(results), "--json").stdout) == rows
    shown = tbdkit("show", "last", "--results", str(results))
    assert shown.returncode == 0 and "cpu_utilization" in shown.stdout and "samples/s" in shown.stdout
    missing = tbdkit("show", "nope", "--results", str(results))
    assert missing.returncode == 2 and "tbdkit runs" in missing.stderr


@pytest.mark.parametrize("args, words", [
    (["--model", "alexnet"], ["Unknown model 'alexnet'", "deepspeech2", "mlp_numpy"]),
    (["--batch", "0"], ["batch_size", "whole number from 1 to 65,536"]),
    (["--batch", "4,x"], ["'x' is not a whole number"]),
    (["--framework", "jax"], ["unknown framework 'jax'", "pytorch, tensorflow, mxnet"]),
    (["--precision", "fp16"], ["precision", "'fp32', 'tf32', 'amp', 'bf16' or 'fp8'"]),
    (["--data", "/no/such/features.npz"], ["does not exist"]),
])
def test_bad_input_is_one_clear_error(tmp_path, args, words):
    proc = tbdkit("bench", *MODEL, *FAST, "--results", str(tmp_path / "r"), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error:")
    for word in words:
        assert word in proc.stderr.replace("\n", " ")
    assert run_dirs(tmp_path / "r") == []


def test_a_dataset_the_reader_refuses_is_one_sentence(tmp_path):
    """The model's reader checks the dataset on the host before any run: its DataError is one sentence (the
    LibriSpeech reader's own refusals are tests/test_deepspeech2_data.py's)."""
    bad = tmp_path / "features.npz"
    bad.write_text("not an npz")
    proc = tbdkit("bench", *MODEL, *FAST, "--results", str(tmp_path / "r"), "--data", str(bad))
    assert proc.returncode == 2 and "cannot be read as an .npz of `features` and `labels`" in proc.stderr.replace("\n", " ")
    assert "Traceback" not in proc.stderr and run_dirs(tmp_path / "r") == []


def test_framework_without_an_implementation(tmp_path):
    folder = tmp_path / "workloads" / "mlp_mine"  # a model of the user's: the machinery check's MLP, NumPy only
    folder.mkdir(parents=True)
    source = Path(__file__).parents[1] / "workloads" / "mlp_numpy"
    for name in ("workload.toml", "data.py", "numpy.py"):
        (folder / name).write_text((source / name).read_text().replace('name = "mlp_numpy"', 'name = "mlp_mine"'))
    proc = tbdkit("bench", *SHORT, "--model", "mlp_mine", "--results", str(tmp_path / "r"), "--framework", "pytorch",
                  "--workloads", str(tmp_path / "workloads"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no 'pytorch' implementation; it has numpy" in proc.stderr.replace("\n", " ")


def test_framework_not_installed_says_how(tmp_path):
    proc = tbdkit("bench", "--model", "deepspeech2", *SHORT, "--results", str(tmp_path / "r"), "--framework", "pytorch",
                  env={"TBDKIT_VENVS": str(tmp_path / "venvs")})
    assert proc.returncode == 2
    assert "not installed" in proc.stderr and "tbdkit setup pytorch" in proc.stderr


def test_out_of_memory_is_marked_and_loses_nothing(tmp_path):
    results = tmp_path / "r"
    Index(results).add(results)  # an index that exists before
    proc = tbdkit("bench", *MODEL, *FAST, "--results", str(results), "--batch", "1,65536", "--memory-limit-mb", "40")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summaries = [json.loads((d / "summary.json").read_text()) for d in run_dirs(results)]
    assert [s["batch_size"] for s in summaries] == [1, 65536]
    fits = summaries[0]["status"]  # ok, or disturbed beside a neighbour test: it trained either way
    assert fits in MEASURED and summaries[1]["status"] == "oom", summaries
    assert summaries[1]["error"].startswith("out of memory at batch size 65536: try a smaller batch")
    assert {r["status"] for r in Index(results).runs()} == {fits, "oom"}
    assert "oom" in proc.stdout


def test_ctrl_c_after_the_window_keeps_the_run_and_ends_the_list_with_130(tmp_path):
    """A Ctrl-C that reaches a run after its sample window (CI caught one in the analysis phase): the run keeps
    what it measured, but the user asked to stop: the runs after it never start and the command exits 130.
    The Ctrl-C is raised in this process as the display shows the analysis phase, so it lands there every time."""
    from tbdkit.bench.run_list import run_all
    from tbdkit.results.summary import exit_code_of
    from tbdkit.spec import run_spec as specs

    runs = [specs.build(model="mlp_numpy", framework="numpy", batch_size=b, preset="smoke", device="cpu",
                        measure={"max_warmup_s": 0.5, "max_measure_s": 1.0}) for b in (2, 4)]
    with ctrl_c_at("analysis"):
        summaries = run_all(runs, tmp_path / "r")
    assert summaries.interrupted and len(summaries) == 1  # the second batch size never started
    assert summaries[0]["status"] in MEASURED and summaries[0]["window"]["stop_reason"] != "interrupted"
    assert exit_code_of([s["status"] for s in summaries], interrupted=summaries.interrupted) == 130
    assert exit_code_of([s["status"] for s in summaries]) == 0
    assert [r["status"] for r in Index(tmp_path / "r").runs()] == [summaries[0]["status"]]


def test_ctrl_c_marks_the_run_interrupted(tmp_path):
    results = tmp_path / "r"
    proc = subprocess.Popen(tbdkit_command("bench", *MODEL, "--framework", "numpy", "--preset", "smoke", "--device", "cpu",
                             "--batch", "2,4", "--max-warmup-s", "0.5", "--max-measure-s", "120", "--target-ci",
                             "0.00001", "--results", str(results)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # as from a terminal: a shell's background job (a CI runner's, say) hands
                            # SIGINT on ignored, and Python then never raises KeyboardInterrupt
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline:
        logs = [d / "log.txt" for d in run_dirs(results) if (d / "log.txt").exists()]
        if logs and '"measuring"' in logs[0].read_text():
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the run never reached its sample window")
    # early inside the window, well before its 2,000-iteration cap ends it (a Ctrl-C after it is the next test's)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err
    (run,) = run_dirs(results)  # the second batch size never started
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["window"]["stop_reason"] == "interrupted"
    assert (run / "iterations.csv").read_text().count("measure") >= 1
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    assert [r["status"] for r in Index(results).runs()] == ["interrupted"]


def test_bench_json_stdout_is_only_json(one_run):
    """`--json` is for scripts: the live progress goes to stderr, stdout parses as the summaries."""
    _, proc = one_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (summary,) = json.loads(proc.stdout)
    assert summary["status"] in MEASURED and summary["metrics"]["throughput"]["value"] > 0
    assert "mlp_numpy/numpy/b16" in proc.stderr
