"""trace.json (a run's Chrome trace-event timeline) read by a real consumer, Holistic Trace Analysis's
trace parser, and mllog.txt read by mlperf-logging's own log parser; both from constructed run
folders (tests/test_bench_cli.py checks both in a real smoke run, with `tbdkit show --trace`). Real run
folders of every stack (tests/corpus/) are read by HTA and MLCommons' parser and checker in
tests/test_corpus_readers.py; the folders built here hold what a real run does not give on demand: an end
rounded 1 µs past the next start, a profiler trace and its anchor, a run without samples_origin_s, known
times to the millisecond, a compile phase of a known length."""

from __future__ import annotations

import csv
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest
from trace_readers import ARGS, IMPORT_ERRORS, SLICES, hta_frame, hta_parents, parse_mllog, perfetto

from tbdkit.spec import catalog
from tbdkit.results import mllog
from tbdkit.analysis import trace
from tbdkit.results import files as runfiles

PHASES = ["warmup"] * 4 + ["measure"] * 6 + ["analysis"] * 2
ORIGIN_S = 0.4123  # the sampler started a little after the window's first iteration began
WINDOW_END_US = 1.45e6  # the end of iteration 9, the window's last: the sum of 0.1 + 0.01 i for i < 10


def make_run(run: Path) -> dict:
    run.mkdir(parents=True, exist_ok=True)
    rows, t = [], 0.0
    for i, phase in enumerate(PHASES):
        seconds = 0.1 + 0.01 * i
        rows.append({"iteration": i, "phase": phase, "start_s": round(t, 6), "seconds": seconds,
                     "data_wait_s": 0.002 * (i + 1), "samples": 8, "work": 8.0, "loss": 1.0 - 0.01 * i})
        t += seconds
    with (run / runfiles.ITERATIONS).open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with (run / runfiles.SAMPLES).open("w", newline="") as f:
        w = csv.DictWriter(f, ["t_s", "cpu_percent", "rss_mib", "gpu_util_percent", "gpu_power_w"])
        w.writeheader()
        for k in range(5):  # the GPU columns are empty on a CPU run: no counter for them
            w.writerow({"t_s": 0.1 * (k + 1), "cpu_percent": 50 + k, "rss_mib": 100 + k,
                        "gpu_util_percent": "" if k < 4 else 30, "gpu_power_w": ""})
    return {"run_id": run.name, "model": "deepspeech2", "framework": "pytorch", "status": "ok",
            "window": {"first_iteration": 4, "last_iteration": 9, "samples_origin_s": ORIGIN_S},
            "warmup": {"iterations": 4}, "metrics": {"data_wait": {"value": 2.0, "unit": "%", "method": "m"}}}


def test_iterations_spans_and_data_wait_line_up_with_iterations_csv(tmp_path) -> None:
    run = tmp_path / "run1"
    summary = make_run(run)
    path = trace.write(run, summary)
    df = hta_frame(path)
    rows = list(csv.DictReader((run / runfiles.ITERATIONS).open()))
    for row in rows:
        (event,) = df[df["name_text"] == f"ProfilerStep#{row['iteration']}"].itertuples()
        assert event.cat_text == row["phase"]
        assert event.ts == pytest.approx(float(row["start_s"]) * 1e6, abs=1)
        assert event.dur == pytest.approx(float(row["seconds"]) * 1e6, abs=1)
    waits = df[df["name_text"] == "data wait"].sort_values("ts")
    assert list(waits["dur"]) == pytest.approx([float(r["data_wait_s"]) * 1e6 for r in rows], abs=1)
    # the phases as spans holding exactly their iterations: warm-up, then the sample window
    for span, phase in (("warm-up", "warmup"), ("sample window", "measure")):
        (s,) = df[df["name_text"] == span].itertuples()
        mine = [r for r in rows if r["phase"] == phase]
        assert s.ts == pytest.approx(float(mine[0]["start_s"]) * 1e6, abs=1)
        assert s.ts + s.dur == pytest.approx((float(mine[-1]["start_s"]) + float(mine[-1]["seconds"])) * 1e6, abs=1)
    window = [r for r in rows if r["phase"] == "measure"]
    assert [int(r["iteration"]) for r in window] == [4, 5, 6, 7, 8, 9]


def test_every_sampled_instrument_is_a_counter_track_on_the_loops_clock(tmp_path) -> None:
    run = tmp_path / "run1"
    summary = make_run(run)
    doc = json.loads(trace.write(run, summary).read_text())
    counters: dict[str, list[float]] = {}  # name -> [ts, value, ts, value, ...]
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            counters.setdefault(e["name"], []).extend((e["ts"], next(iter(e["args"].values()))))
    samples = list(csv.DictReader((run / runfiles.SAMPLES).open()))
    assert set(counters) == {"cpu_percent", "rss_mib", "gpu_util_percent", "data wait share"}
    # each counter ends with its last value at the window's end (iteration 9's end, 1.45 s), where sampling stopped
    assert counters["cpu_percent"] == pytest.approx([x for s in samples for x in
                                                     ((ORIGIN_S + float(s["t_s"])) * 1e6, float(s["cpu_percent"]))]
                                                    + [WINDOW_END_US, 54.0])
    assert counters["gpu_util_percent"] == pytest.approx([(ORIGIN_S + 0.5) * 1e6, 30.0, WINDOW_END_US, 30.0])
    assert max(e["ts"] for e in doc["traceEvents"] if e["ph"] == "C" and e["pid"] == trace.SAMPLES_PID) == WINDOW_END_US
    (sampling,) = [e for e in doc["traceEvents"] if e["name"] == "sampling"]
    assert sampling["ts"] + sampling["dur"] == pytest.approx(WINDOW_END_US) and "samples_end" in doc["otherData"]
    rows = list(csv.DictReader((run / runfiles.ITERATIONS).open()))
    share = [x for r in rows for x in (float(r["start_s"]) * 1e6, 100 * float(r["data_wait_s"]) / float(r["seconds"]))]
    assert counters["data wait share"] == pytest.approx(share, abs=1e-3)
    assert doc["otherData"]["clock"] == trace.CLOCK and "profiler" in doc["otherData"]


def test_a_profiler_trace_is_shifted_onto_the_loops_clock_by_its_anchor(tmp_path) -> None:
    run = tmp_path / "run1"
    summary = make_run(run)
    profiler = {"traceEvents": [
        {"name": trace.ANCHOR_EVENT, "ph": "X", "ts": 5_000_000.0, "dur": 2.0, "pid": 77, "tid": 1, "cat": "user_annotation"},
        {"name": "volta_sgemm", "ph": "X", "ts": 5_000_100.0, "dur": 50.0, "pid": 0, "tid": 7, "cat": "kernel"}],
        "tbdkit_clock": {"anchor_loop_s": 1.5}}
    (run / runfiles.PROFILER_TRACE).write_text(json.dumps(profiler))
    doc = trace.build(run, summary)
    (kernel,) = [e for e in doc["traceEvents"] if e["name"] == "volta_sgemm"]
    assert kernel["ts"] == pytest.approx(1.5e6 + 100 - 1)  # the anchor's midpoint is 1.5 s on the loop's clock
    assert "profiler" not in doc["otherData"]
    (run / runfiles.PROFILER_TRACE).write_text(json.dumps({"traceEvents": profiler["traceEvents"]}))
    doc = trace.build(run, summary)
    assert not [e for e in doc["traceEvents"] if e["name"] == "volta_sgemm"]
    assert "cannot be aligned" in doc["otherData"]["profiler"]


def test_a_run_without_samples_origin_places_samples_from_the_window(tmp_path) -> None:
    run = tmp_path / "run1"
    summary = make_run(run)
    del summary["window"]["samples_origin_s"]
    doc = trace.build(run, summary)
    first = min(e["ts"] for e in doc["traceEvents"] if e["name"] == "cpu_percent")
    start4 = next(e["ts"] for e in doc["traceEvents"] if e["name"] == "ProfilerStep#4")
    assert first == pytest.approx(start4 + 0.1e6) and "samples_clock" in doc["otherData"]


def write_iterations(run: Path, rows: list[dict]) -> None:
    with (run / runfiles.ITERATIONS).open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def rounded_apart(run: Path) -> dict:
    """A run folder as a kit that rounded start_s and seconds each to 6 decimals wrote it: iteration 1
    seems to end 1 µs after iteration 2 starts (20.595188 + 1.628608 > 22.223795); the warm-up and the
    analysis are one iteration each, a span of the same extent as the iteration it holds."""
    run.mkdir(parents=True)
    starts = [19.0, 20.595188, 22.223795, 23.5, 24.25]
    seconds = [1.595188, 1.628608, 1.276205, 0.75, 0.5]
    phases = ["warmup", "measure", "measure", "measure", "analysis"]
    write_iterations(run, [{"iteration": i, "phase": phase, "start_s": start, "seconds": s, "data_wait_s": 0.001,
                            "samples": 4, "work": 4.5, "loss": 2.25}
                           for i, (phase, start, s) in enumerate(zip(phases, starts, seconds))])
    return {"run_id": run.name, "status": "ok", "window": {"first_iteration": 1, "samples_origin_s": 20.6}}


EXPECTED_PARENTS = {"warm-up": None, "sample window": None, "analysis": None, "ProfilerStep#0": "warm-up",
                    "ProfilerStep#1": "sample window", "ProfilerStep#2": "sample window",
                    "ProfilerStep#3": "sample window", "ProfilerStep#4": "analysis"}


def test_perfetto_imports_every_iteration_inside_its_phase_with_numeric_args(tmp_path) -> None:
    """Perfetto's trace processor (the UI's, in headless Chromium) drops a complete event that overlaps
    the one before it on its track, and nests an event inside one of the same extent read before it."""
    path = trace.write(tmp_path / "run1", rounded_apart(tmp_path / "run1"))
    got = perfetto([path], {"errors": IMPORT_ERRORS, "slices": SLICES, "args": ARGS})[path]
    assert got["errors"] == []
    parents = {s["name"]: s["parent"] for s in got["slices"] if s["name"] != "data wait"}
    assert parents == EXPECTED_PARENTS
    waits = [s for s in got["slices"] if s["name"] == "data wait"]
    assert [s["parent"] for s in waits] == [f"ProfilerStep#{i}" for i in range(5)]
    types = {a["key"]: a["value_type"] for a in got["args"] if a["name"] == "ProfilerStep#1"}
    assert types == {"args.iteration": "int", "args.phase": "string", "args.data_wait_s": "real",
                     "args.samples": "int", "args.work": "real", "args.loss": "real"}
    iterations = sorted((s["ts"], s["dur"]) for s in got["slices"] if s["name"].startswith("ProfilerStep#"))
    assert iterations[1] == (20_595_188_000, 1_628_607_000)  # nanoseconds: it ends where iteration 2 starts


def test_hta_nests_every_iteration_inside_its_phase(tmp_path) -> None:
    path = trace.write(tmp_path / "run1", rounded_apart(tmp_path / "run1"))
    assert {k: v for k, v in hta_parents(path).items() if k != "data wait"} == EXPECTED_PARENTS
    doc = json.loads(path.read_text())
    (it,) = [e for e in doc["traceEvents"] if e["name"] == "ProfilerStep#1"]
    assert it["args"] == {"iteration": 1, "phase": "measure", "data_wait_s": 0.001, "samples": 4, "work": 4.5,
                          "loss": 2.25}


def test_an_iterations_row_ends_where_the_next_one_starts() -> None:
    """iterations.csv rounds each iteration's end time, not its duration: start_s + seconds of one row is
    the next row's start_s, as the loop's iterations are back to back."""
    from tbdkit.agent.loop import Iteration

    ends = [0.0, 20.5951876, 22.2237954, 23.0000004999, 24.9999995]  # seconds since the loop started
    rows = [Iteration(i, "measure", a, b - a, 0.0, 1, 1.0, None).row() for i, (a, b) in enumerate(zip(ends, ends[1:]))]
    assert [round(r["start_s"] + r["seconds"], 6) for r in rows[:-1]] == [r["start_s"] for r in rows[1:]]
    assert rows[1]["start_s"] == 20.595188 and rows[1]["seconds"] == pytest.approx(1.628607, abs=1e-9)


def test_mllog_lines_parse_with_mlperf_loggings_reader(tmp_path) -> None:
    spec = {"model": "deepspeech2", "framework": "pytorch", "preset": "paper", "variant": None, "seed": 3,
            "batch_size": 4, "device": "cpu", "precision": "fp32"}
    summary = {"run_id": "r", "status": "ok", "model": "deepspeech2", "framework": "pytorch", "batch_size": 4,
               "seed": 3, "preset": "paper", "precision": "fp32", "device": "cpu",
               "started_utc": "2026-11-24T10:00:00+00:00", "finished_utc": "2026-11-24T10:01:30+00:00",
               "metrics": {"throughput": {"value": 12.5, "unit": "audio_s/s", "method": "ratio", "ci95_half_width": 0.2},
                           "gpu_utilization": {"value": None, "unit": "%", "method": "nvml", "reason": "no GPU"}}}
    got = parse_mllog(mllog.write(tmp_path, summary, spec))
    hp = catalog.get("deepspeech2").hp("paper")
    assert got["seed"]["value"] == 3 and got["global_batch_size"]["value"] == 4
    assert got["opt_name"]["value"] == hp["optimizer"] == "sgd"
    assert got["opt_base_learning_rate"]["value"] == hp["learning_rate"]
    assert got["opt_momentum"]["value"] == hp["momentum"]
    assert got["submission_benchmark"]["value"] == "tbd_deepspeech2"
    assert got["tbdkit_throughput"]["value"] == 12.5 and got["tbdkit_throughput"]["metadata"]["unit"] == "audio_s/s"
    assert got["tbdkit_gpu_utilization"]["value"] is None and got["tbdkit_gpu_utilization"]["metadata"]["reason"] == "no GPU"
    assert got["run_stop"]["metadata"]["status"] == "success"
    text = (tmp_path / runfiles.MLLOG).read_text()
    assert all(line.startswith(":::MLLOG ") for line in text.splitlines())
    assert got["seed"]["metadata"]["file"] == "tbdkit/results/mllog.py"  # the call site inside the kit, not this machine's path
    starts = [json.loads(line.removeprefix(":::MLLOG "))["time_ms"] for line in text.splitlines()]
    start_ms = int(dt.datetime(2026, 11, 24, 10, tzinfo=dt.timezone.utc).timestamp() * 1000)
    assert min(starts) == start_ms and max(starts) == start_ms + 90_000  # run start and stop from the summary


def finished_run(run: Path) -> tuple[dict, dict]:
    """A run folder as the agent leaves a finished run: two warm-up iterations, a window of three, one
    analysis iteration, the loop started 12.25 s after the agent (the model was built before it)."""
    run.mkdir(parents=True)
    rows, t = [], 0.0
    for i, (phase, seconds) in enumerate(zip(["warmup"] * 2 + ["measure"] * 3 + ["analysis"],
                                             [1.5, 1.25, 1.0, 1.125, 1.0, 2.0])):
        rows.append({"iteration": i, "phase": phase, "start_s": t, "seconds": seconds, "data_wait_s": 0.0,
                     "samples": 4, "work": 4.0, "loss": 1.0})
        t += seconds
    write_iterations(run, rows)
    spec = {"model": "deepspeech2", "framework": "pytorch", "preset": "smoke", "seed": 1, "batch_size": 4,
            "device": "cpu", "precision": "fp32"}
    summary = {"run_id": run.name, "status": "ok", "model": "deepspeech2", "framework": "pytorch", "batch_size": 4,
               "seed": 1, "preset": "smoke", "precision": "fp32", "device": "cpu",
               "started_utc": "2026-11-24T10:00:00.125+00:00", "loop_started_utc": "2026-11-24T10:00:12.375+00:00",
               "finished_utc": "2026-11-24T10:00:31.000+00:00",
               "math_mode": {"mode": "fp32", "tf32_matmul": False, "autocast_dtype": None},
               "window": {"first_iteration": 2, "last_iteration": 4, "iterations": 3},
               "metrics": {"throughput": {"value": 3.8, "unit": "audio_s/s", "method": "ratio"}}}
    return summary, spec


def test_mllog_times_the_init_the_loop_and_the_window_in_milliseconds(tmp_path) -> None:
    summary, spec = finished_run(tmp_path / "run1")
    path = mllog.write(tmp_path / "run1", summary, spec)
    records = [json.loads(line.removeprefix(":::MLLOG ")) for line in path.read_text().splitlines()]
    at = {r["key"]: r for r in records}
    agent = int(dt.datetime(2026, 11, 24, 10, tzinfo=dt.timezone.utc).timestamp() * 1000) + 125
    loop = agent + 12_250
    assert at["init_start"]["time_ms"] == agent and at["init_start"]["event_type"] == "INTERVAL_START"
    assert at["init_stop"]["time_ms"] == at["run_start"]["time_ms"] == loop  # not the agent's start
    assert at["block_start"]["time_ms"] == loop + 2750 and at["block_start"]["metadata"]["samples_count"] == 8
    assert at["block_stop"]["time_ms"] == loop + 5875 and at["block_stop"]["metadata"]["samples_count"] == 20
    assert at["train_samples"]["value"] == 24
    assert at["run_stop"]["time_ms"] == loop + 7875  # the last iteration's end
    keys = [r["key"] for r in records]
    assert keys.index("init_start") < keys.index("init_stop") < keys.index("run_start") < keys.index("block_start")
    assert keys.index("block_start") < keys.index("block_stop") < keys.index("run_stop") == len(keys) - 1
    assert at["lowest_numerical_precision_in_linear"]["value"] == "fp32" and at["tensor_parallelism"]["value"] == 1


def compiled_run(run: Path) -> tuple[dict, dict]:
    """finished_run with a compile phase of two iterations (3 s, 0.5 s) before its warm-up."""
    summary, spec = finished_run(run)
    rows = list(csv.DictReader((run / runfiles.ITERATIONS).open()))
    phase = [{**rows[0], "iteration": 0, "phase": "compile", "start_s": 0.0, "seconds": 3.0},
             {**rows[0], "iteration": 1, "phase": "compile", "start_s": 3.0, "seconds": 0.5}]
    shifted = [{**r, "iteration": int(r["iteration"]) + 2, "start_s": float(r["start_s"]) + 3.5} for r in rows]
    write_iterations(run, phase + shifted)
    summary = {**summary, "window": {"first_iteration": 4, "last_iteration": 6, "iterations": 3},
               "compile": {"graph": "compiled", "backend": "inductor"},
               "metrics": {**summary["metrics"], "compile_s": {"value": 2.75, "unit": "s", "method": "m"}}}
    return summary, {**spec, "graph": "compiled"}


def test_mllog_of_a_compiled_run_says_so_and_counts_its_compile_phase_in_init(tmp_path) -> None:
    summary, spec = compiled_run(tmp_path / "run1")
    path = mllog.write(tmp_path / "run1", summary, spec)
    records = [json.loads(line.removeprefix(":::MLLOG ")) for line in path.read_text().splitlines()]
    at = {r["key"]: r for r in records}
    loop = int(dt.datetime(2026, 11, 24, 10, tzinfo=dt.timezone.utc).timestamp() * 1000) + 125 + 12_250
    assert at["tbdkit_graph"]["value"] == "compiled" and at["tbdkit_graph"]["metadata"]["compile_s"] == 2.75
    assert "counted in init" in at["tbdkit_graph"]["metadata"]["what"]
    assert at["init_stop"]["time_ms"] == at["run_start"]["time_ms"] == loop + 3500  # after the compile phase
    assert at["block_start"]["time_ms"] == loop + 3500 + 2750
    expected, other = mllog.verdict(mllog.compliance(path, "6.1.0"))
    assert other == [] and expected == sorted(mllog.SUBMISSION_ONLY)
    summary, spec = finished_run(tmp_path / "run2")
    at = {json.loads(x.removeprefix(":::MLLOG "))["key"]: json.loads(x.removeprefix(":::MLLOG "))
          for x in mllog.write(tmp_path / "run2", summary, spec).read_text().splitlines()}
    assert at["tbdkit_graph"]["value"] == "standard"


@pytest.mark.parametrize("ruleset", ["6.1.0", "5.1.0"])
def test_mlcommons_checker_passes_every_rule_a_tbdkit_run_can_meet(tmp_path, ruleset) -> None:
    """MLCommons' compliance checker, its rule engine and its training rule files, over a finished run's log:
    the only failures are the rules docs/artifact.md lists as an MLPerf submission's alone."""
    summary, spec = finished_run(tmp_path / "run1")
    path = mllog.write(tmp_path / "run1", summary, spec)
    expected, other = mllog.verdict(mllog.compliance(path, ruleset))
    assert other == []
    assert expected == sorted(mllog.SUBMISSION_ONLY)
    docs = (Path(__file__).parents[1] / "docs" / "artifact.md").read_text()
    assert all(f"`{key}`" in docs for key in mllog.SUBMISSION_ONLY)


def test_the_checker_command_reads_a_tbdkit_log_as_the_docs_say(tmp_path) -> None:
    """`python -m mlperf_logging.compliance_checker` itself stops with a traceback on tbd_<model> (it has no
    rule file for it); the kit's command runs the same checker with that benchmark's rules empty."""
    summary, spec = finished_run(tmp_path / "run1")
    path = mllog.write(tmp_path / "run1", summary, spec)
    plain = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", str(path),
                            "--log_output", str(tmp_path / "checker.log")], capture_output=True, text=True,
                           timeout=120)
    assert plain.returncode != 0 and "open_tbd_deepspeech2.yaml" in plain.stderr
    proc = subprocess.run([sys.executable, "-m", "tbdkit.results.mllog", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].endswith("passes (training 6.1.0; every rule but the 4 above)")
    assert "FAILED" not in proc.stdout and "eval_accuracy" in proc.stdout
    del summary["loop_started_utc"]  # a run that never got to its loop is not a compliant log
    write_iterations(tmp_path / "run1", [{"iteration": "", "phase": "", "start_s": "", "seconds": ""}])
    mllog.write(tmp_path / "run1", {**summary, "status": "failed", "window": None}, spec)
    proc = subprocess.run([sys.executable, "-m", "tbdkit.results.mllog", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and "FAILED: " in proc.stdout and "block_start" in proc.stdout


@pytest.mark.parametrize("status, stop", [("ok", "success"), ("disturbed", "success"), ("failed", "aborted")])
def test_a_disturbed_run_completed_in_mlperfs_words(tmp_path, status, stop) -> None:
    spec = {"model": "deepspeech2", "framework": "pytorch", "preset": "smoke", "seed": 1, "batch_size": 2}
    summary = {"run_id": "r", "status": status, "model": "deepspeech2", "framework": "pytorch", "batch_size": 2,
               "seed": 1, "preset": "smoke", "started_utc": "2026-11-24T10:00:00+00:00"}
    got = parse_mllog(mllog.write(tmp_path, summary, spec))["run_stop"]["metadata"]
    assert (got["status"], got["tbdkit_status"]) == (stop, status)


def test_the_launcher_writes_the_mllog_when_it_finishes_a_run(tmp_path) -> None:
    from tbdkit.launch import finalize
    from tbdkit.spec.run_spec import RunSpec

    spec = RunSpec(model="deepspeech2", batch_size=2, device="cpu", preset="smoke", seed=5)
    run = tmp_path / "run1"
    run.mkdir()
    (run / runfiles.SUMMARY).write_text(json.dumps({
        "run_id": "run1", "status": "oom", "error": "out of memory at batch size 2", "model": "deepspeech2",
        "framework": "pytorch", "batch_size": 2, "seed": 5, "preset": "smoke", "started_utc": "2026-11-24T10:00:00+00:00"}))
    events: list[dict] = []
    finalize(run, spec, 3, events.append)
    got = parse_mllog(run / runfiles.MLLOG)
    assert got["seed"]["value"] == 5 and got["opt_base_learning_rate"]["value"] == catalog.get("deepspeech2").hp("smoke")["learning_rate"]
    assert got["run_stop"]["metadata"]["status"] == "aborted" and "out of memory" in got["run_stop"]["metadata"]["error"]
    assert not events


def test_show_trace_names_the_file_or_says_why_there_is_none(tmp_path) -> None:
    from tbdkit.cli.runs import trace_help
    from tbdkit.core.errors import UserError

    run = tmp_path / "run1"
    summary = make_run(run)
    with pytest.raises(UserError, match="has no trace.json"):
        trace_help(run)
    trace.write(run, summary)
    text = trace_help(run)
    assert str((run / runfiles.TRACE).resolve()) in text and "ui.perfetto.dev" in text
    assert "vizviewer" in text and "chrome://tracing" not in text  # gone from current Chromium


def test_hta_opens_a_two_worker_runs_traces_folder_as_the_docs_say(tmp_path) -> None:
    """Holistic Trace Analysis's TraceAnalysis(trace_dir=<run folder>/traces), as docs/artifact.md and
    `tbdkit show --trace` say: it finds both ranks of a two-worker job and every iteration as a step. The
    run folder itself is not a trace folder (spec.json, summary.json are JSON too)."""
    from hta.trace_analysis import TraceAnalysis

    from tbdkit.cli.runs import trace_help

    job = tmp_path / "results" / "run-2w"
    for rank, folder in enumerate((job, job / "workers" / "rank1")):
        summary = {**make_run(folder), "world_size": 2}
        (folder / runfiles.SUMMARY).write_text(json.dumps(summary))
        trace.write(folder, summary)
    (job / runfiles.SPEC).write_text("{}")
    assert sorted(p.name for p in (job / trace.TRACES_DIR).iterdir()) == ["rank0.json", "rank1.json"]
    assert f"TraceAnalysis(trace_dir={str((job / trace.TRACES_DIR).resolve())!r})" in trace_help(job)
    analysis = TraceAnalysis(trace_dir=str(job / trace.TRACES_DIR))
    assert sorted(analysis.t.get_ranks()) == [0, 1]
    for rank in (0, 1):
        # every iteration is a step; HTA leaves out the trace's last one, as it does a profiler's last step
        assert set(range(len(PHASES) - 1)) <= {int(i) for i in analysis.t.get_iterations(rank)}
