"""trace.json (a run's Chrome trace-event timeline) read by a real consumer, Holistic Trace Analysis's
trace parser, and mllog.txt read by mlperf-logging's own log parser; both from constructed run
folders (tests/test_bench_cli.py checks both in a real smoke run, with `tbdkit show --trace`)."""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path

import pytest
from trace_readers import hta_frame, parse_mllog

from tbdkit.spec import catalog
from tbdkit.results import mllog
from tbdkit.analysis import trace
from tbdkit.results import files as runfiles

PHASES = ["warmup"] * 4 + ["measure"] * 6 + ["analysis"] * 2
ORIGIN_S = 0.4123  # the sampler started a little after the window's first iteration began


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
        (event,) = df[df["name_text"] == f"iteration {row['iteration']}"].itertuples()
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
    assert counters["cpu_percent"] == pytest.approx([x for s in samples for x in
                                                     ((ORIGIN_S + float(s["t_s"])) * 1e6, float(s["cpu_percent"]))])
    assert counters["gpu_util_percent"] == pytest.approx([(ORIGIN_S + 0.5) * 1e6, 30.0])
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
    start4 = next(e["ts"] for e in doc["traceEvents"] if e["name"] == "iteration 4")
    assert first == pytest.approx(start4 + 0.1e6) and "samples_clock" in doc["otherData"]


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
    assert str((run / runfiles.TRACE).resolve()) in text and "ui.perfetto.dev" in text and "chrome://tracing" in text
