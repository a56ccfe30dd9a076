"""What every run folder must hold, whoever made it: `assert_run_holds(run_dir)` after any test that makes a run.

It reads the folder's files directly (the standard library and the kit's own summary model, so it runs in
every environment, the framework stacks' too) and checks, for the run's status:

- every file the status implies is there and parses (summary.json through the kit's Summary model, every
  JSON file an object, the CSVs with their columns, each mllog.txt line a `:::MLLOG` JSON record);
- throughput = work / seconds of the sample window (iterations.csv's rows of the window, within the CSV's
  rounding), and the window's seconds and sample throughput with it;
- the iteration counts agree: summary (warm-up, window) = iterations.csv = trace.json (one slice per
  iteration, one span per phase) = mllog.txt (the window's block, the samples trained);
- every metric is a value with a unit and a method, or null with a unit, a method and the reason, and none (nor
  any memory category) is null because its analysis failed;
- the results index's row (where the folder's results folder holds one) equals the summary;
- the trace nests: each iteration inside its phase's span on iterations.csv's clock, the phases one after
  another, each data wait inside its iteration.

A data-parallel job's workers/rank<N>/ folders are checked as runs of their own. A failed check raises
AssertionError naming the folder and what is wrong (`RunBroken`)."""

from __future__ import annotations

import csv
import json
import math
import re
import sqlite3
from pathlib import Path
from typing import Any

from tbdkit.results import files
from tbdkit.results import summary as summaries
from tbdkit.results.index import row_of

MEASURED = set(summaries.MEASURED)
ITERATION_COLUMNS = ("iteration", "phase", "start_s", "seconds", "data_wait_s", "samples", "work", "loss")
PHASE_ORDER = ("compile", "warmup", "measure", "analysis", "profiled")
STEP = re.compile(r"ProfilerStep#(\d+)")
CSV_ROUNDING = 1e-6  # iterations.csv holds times and work to 6 decimals (tbdkit.agent.loop.Iteration.row)
TRACE_ROUNDING_US = 1.0  # trace.json's times are iterations.csv's, in µs, to its rounding (tbdkit.analysis.trace)
INDEX = "index.sqlite"


class RunBroken(AssertionError):
    """A run folder that does not hold what every run must: `<folder>: <what is wrong>`."""


def _fail(run_dir: Path, why: str) -> None:
    raise RunBroken(f"{run_dir.name}: {why}")


def _check(run_dir: Path, ok: bool, why: str) -> None:
    if not ok:
        _fail(run_dir, why)


def _json_object(run_dir: Path, name: str) -> dict[str, Any]:
    try:
        doc = json.loads((run_dir / name).read_bytes())
    except (OSError, ValueError) as exc:
        raise RunBroken(f"{run_dir.name}: {name} is not readable JSON ({type(exc).__name__}: {exc})") from None
    _check(run_dir, isinstance(doc, dict), f"{name} holds {type(doc).__name__}, not an object")
    return doc


def _rows(run_dir: Path, name: str, columns: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        with (run_dir / name).open(newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            header = tuple(reader.fieldnames or ())
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        raise RunBroken(f"{run_dir.name}: {name} is not readable CSV ({type(exc).__name__}: {exc})") from None
    missing = [c for c in columns if c not in header]
    _check(run_dir, not missing, f"{name} lacks the column(s) {', '.join(missing)} (it has {', '.join(header)})")
    for line, row in enumerate(rows, start=2):
        _check(run_dir, None not in row and all(v is not None for v in row.values()),
               f"{name} line {line} has {len(header)} columns in its header but not in the row")
    return rows


def _number(run_dir: Path, where: str, text: str | None, positive: bool = False) -> float:
    try:
        value = float(text) if text not in (None, "") else math.nan
    except ValueError:
        value = math.nan
    _check(run_dir, math.isfinite(value) and (value > 0 or not positive),
           f"{where} is {text!r}, not a {'positive ' if positive else ''}finite number")
    return value


# ---------------------------------------------------------------------------------------------------- files


def expected_files(run_dir: Path, summary: dict[str, Any], spec: dict[str, Any] | None, launched: bool) -> set[str]:
    """The files a run folder must hold, by what its summary says it got to (files its summary names as not
    written, with the reason, excepted)."""
    need = {files.SUMMARY}
    if launched:  # a launcher's run folder: its spec, its log, the MLPerf log written after the run
        need |= {files.SPEC, files.LOG, files.MLLOG}
    if "math_mode" in summary or summary.get("status") in MEASURED:  # the agent got past setup: env.json
        need.add(files.ENV)
    if "loop_started_utc" in summary:  # the training loop ran: its rows, its samples, its timeline
        need |= {files.ITERATIONS, files.SAMPLES, files.TRACE}
    # analyses after the window, as its spec asked (a folder without its spec.json: not known, not required)
    analysed = spec is not None and spec.get("analyses", True) is True and not (summary.get("world_size") or 1) > 1
    windowed = summary.get("preset") != "converge" and not summary.get("profiled_iterations")  # a sample window ran
    if summary.get("status") in MEASURED and analysed and windowed:
        need.add(files.MEMORY)  # the memory breakdown after the window (tbdkit.agent.after_window)
    return need - set(summary.get("files_not_written") or {})


def _parses(run_dir: Path, names: set[str]) -> None:
    """Every run file present parses as its kind."""
    for name in sorted(names):
        if name.endswith(".json") and name != files.SUMMARY:
            _json_object(run_dir, name)
    if files.KERNELS in names:
        _rows(run_dir, files.KERNELS, files.KERNEL_COLUMNS)
    if files.SAMPLES in names:
        rows = _rows(run_dir, files.SAMPLES, ())
        text = (run_dir / files.SAMPLES).read_text()
        _check(run_dir, not text.strip() or text.startswith("t_s"), f"{files.SAMPLES}'s first column is not t_s")
        for line, row in enumerate(rows, start=2):
            _number(run_dir, f"{files.SAMPLES} line {line} t_s", row.get("t_s"))


# ---------------------------------------------------------------------------------------------------- metrics


def check_metrics(run_dir: Path, summary: dict[str, Any]) -> None:
    """Each metric: a finite value with its unit and method, or null with its unit, method and reason."""
    for name, m in (summary.get("metrics") or {}).items():
        _check(run_dir, isinstance(m, dict), f"metric {name} is {m!r}, not an object")
        for key in ("unit", "method"):
            _check(run_dir, isinstance(m.get(key), str) and m[key].strip() != "", f"metric {name} has no {key}")
        value = m.get("value", "absent")
        if value is None:
            reason = m.get("reason")
            _check(run_dir, isinstance(reason, str) and reason.strip() != "", f"metric {name} is null without a reason")
        else:
            _check(run_dir, isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
                   f"metric {name}'s value is {value!r}, not a finite number")


ANALYSIS_FAILED = "analysis failed"  # tbdkit.agent.after_window._guard: "the <name> analysis failed (<error>)"


def check_analyses(run_dir: Path, summary: dict[str, Any]) -> None:
    """No metric and no memory category is null because its analysis failed: a failing analysis leaves the run ok
    (a gap in the results, never a failed run), so only this catches it."""
    nulls = {f"metric {name}": m.get("reason") for name, m in (summary.get("metrics") or {}).items()
             if isinstance(m, dict)}
    memory = run_dir / files.MEMORY
    if memory.is_file():
        doc = _json_object(run_dir, files.MEMORY)
        for name, entry in (doc.get("categories") or {}).items():
            nulls[f"memory category {name}"] = entry.get("reason") if isinstance(entry, dict) else None
    failed = {k: r for k, r in nulls.items() if isinstance(r, str) and ANALYSIS_FAILED in r}
    _check(run_dir, not failed, f"an analysis failed: {failed}")


# ---------------------------------------------------------------------------------------------------- iterations


def _iterations(run_dir: Path) -> list[dict[str, Any]]:
    """iterations.csv's rows as numbers, checked: numbered 0, 1, ... in phase order, back to back on the clock."""
    rows = _rows(run_dir, files.ITERATIONS, ITERATION_COLUMNS)
    out = []
    for line, row in enumerate(rows, start=2):
        where = f"{files.ITERATIONS} line {line}"
        out.append({
            "iteration": int(_number(run_dir, f"{where} iteration", row["iteration"])),
            "phase": row["phase"],
            "start_s": _number(run_dir, f"{where} start_s", row["start_s"]),
            "seconds": _number(run_dir, f"{where} seconds", row["seconds"], positive=True),
            "data_wait_s": _number(run_dir, f"{where} data_wait_s", row["data_wait_s"]),
            "samples": _number(run_dir, f"{where} samples", row["samples"], positive=True),
            "work": _number(run_dir, f"{where} work", row["work"], positive=True),
        })
    numbers = [r["iteration"] for r in out]
    _check(run_dir, numbers == list(range(len(out))), f"{files.ITERATIONS} numbers its iterations {numbers[:8]}..., "
           "not 0, 1, 2, ...")
    phases = [r["phase"] for r in out]
    unknown = sorted(set(phases) - set(PHASE_ORDER))
    _check(run_dir, not unknown, f"{files.ITERATIONS} has the phase(s) {unknown}")
    order = [PHASE_ORDER.index(p) for p in phases]
    _check(run_dir, order == sorted(order), f"{files.ITERATIONS}'s phases are out of order: {list(dict.fromkeys(phases))}")
    for before, after in zip(out, out[1:]):
        end = before["start_s"] + before["seconds"]
        _check(run_dir, abs(end - after["start_s"]) <= 2 * CSV_ROUNDING,
               f"{files.ITERATIONS}: iteration {before['iteration']} ends at {end:.6f} s but the next starts at "
               f"{after['start_s']:.6f} s (the loop's iterations run back to back)")
    return out


def check_window(run_dir: Path, summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """The summary's warm-up and window agree with iterations.csv; throughput = work / seconds of the window."""
    count = {p: sum(1 for r in rows if r["phase"] == p) for p in PHASE_ORDER}
    warmup = summary.get("warmup") or {}
    if "iterations" in warmup:
        _check(run_dir, warmup["iterations"] == count["warmup"],
               f"the summary's warm-up has {warmup['iterations']} iterations, {files.ITERATIONS} {count['warmup']}")
    window = summary.get("window")
    status = summary.get("status")
    if status in MEASURED and summary.get("preset") != "converge" and not summary.get("profiled_iterations"):
        _check(run_dir, isinstance(window, dict), f"a {status} run's summary has no window")
    if not window:
        _check(run_dir, count["measure"] == 0 or status not in MEASURED,
               f"{files.ITERATIONS} has {count['measure']} window rows but the summary no window")
        return
    first, last = window["first_iteration"], window["last_iteration"]
    inside = [r for r in rows if r["phase"] == "measure"]
    _check(run_dir, [r["iteration"] for r in inside] == list(range(first, last + 1)),
           f"the summary's window is iterations {first}-{last}; {files.ITERATIONS}'s measure rows are "
           f"{[r['iteration'] for r in inside][:3]}...")
    _check(run_dir, window["iterations"] == len(inside) == last - first + 1,
           f"the summary's window has {window['iterations']} iterations, {files.ITERATIONS} {len(inside)}")
    if not inside:
        return
    seconds = sum(r["seconds"] for r in inside)
    work = sum(r["work"] for r in inside)
    samples = sum(r["samples"] for r in inside)
    _check(run_dir, abs(window["seconds"] - seconds) <= 2 * CSV_ROUNDING * len(inside),
           f"the summary's window lasts {window['seconds']} s, its rows in {files.ITERATIONS} {seconds:.6f} s")
    if status not in MEASURED:
        return
    metrics = summary.get("metrics") or {}
    # A job's throughput is its workers' together: the window's own is worker0_throughput (tbdkit.agent.run)
    own = metrics.get("worker0_throughput") or metrics.get("throughput") or {}
    _rate(run_dir, "throughput" if "worker0_throughput" not in metrics else "worker0_throughput", own, work, seconds,
          len(inside))
    if "sample_throughput" in metrics:
        _rate(run_dir, "sample_throughput", metrics["sample_throughput"], samples, seconds, len(inside))
    if "aggregate_throughput" in metrics and "worker0_throughput" in metrics:
        per = metrics["aggregate_throughput"].get("per_worker") or []
        total = metrics["aggregate_throughput"]["value"]
        _check(run_dir, len(per) == (summary.get("world_size") or 1) and abs(sum(per) - total) <= 1e-5 * max(1.0, total),
               f"aggregate_throughput {total} is not the sum of its {len(per)} workers' {per}")
        _check(run_dir, metrics["throughput"]["value"] == total, "a job's throughput is not its aggregate throughput")


def _rate(run_dir: Path, name: str, m: dict[str, Any], amount: float, seconds: float, n: int) -> None:
    """A rate metric equals amount / seconds of the window within what the CSV's rounding allows."""
    value = m.get("value")
    _check(run_dir, isinstance(value, (int, float)) and value > 0, f"a measured run's {name} is {value!r}")
    expected = amount / seconds
    # each row's work and the window's end are rounded to 6 decimals; the metric itself too
    tolerance = expected * (n * CSV_ROUNDING / amount + 2 * CSV_ROUNDING * n / seconds) + 1e-6 + 1e-9 * expected
    _check(run_dir, abs(value - expected) <= tolerance,
           f"{name} is {value}, but the window's rows give {amount:.6f} / {seconds:.6f} s = {expected:.6f}")


# ---------------------------------------------------------------------------------------------------- trace


def check_trace(run_dir: Path, summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """trace.json: one slice per iteration at iterations.csv's times, inside its phase's span; the spans one
    after another with the counts of their phase; each data wait inside its iteration."""
    doc = _json_object(run_dir, files.TRACE)
    events = doc.get("traceEvents")
    _check(run_dir, isinstance(events, list), f"{files.TRACE} has no traceEvents list")
    own = [e for e in events if isinstance(e, dict) and e.get("pid") == 1 and e.get("tid") == 1 and e.get("ph") == "X"]
    steps = [e for e in own if STEP.fullmatch(str(e.get("name")))]
    spans = [e for e in own if isinstance(e.get("args"), dict) and "iterations" in e["args"] and "phase" in e["args"]]
    waits = [e for e in own if e.get("name") == "data wait"]
    _check(run_dir, len(steps) == len(rows), f"{files.TRACE} has {len(steps)} iteration slices, {files.ITERATIONS} "
           f"{len(rows)} rows")
    by_phase: dict[str, int] = {}
    for r in rows:
        by_phase[r["phase"]] = by_phase.get(r["phase"], 0) + 1
    got = {s["args"]["phase"]: s["args"]["iterations"] for s in spans}
    _check(run_dir, got == by_phase, f"{files.TRACE}'s phase spans count {got}, {files.ITERATIONS} {by_phase}")
    span_of = {s["args"]["phase"]: s for s in spans}
    ordered = sorted(spans, key=lambda s: s["ts"])
    for a, b in zip(ordered, ordered[1:]):
        _check(run_dir, a["ts"] + a["dur"] <= b["ts"] + TRACE_ROUNDING_US,
               f"{files.TRACE}: the spans {a['name']!r} and {b['name']!r} overlap")
    for step, row in zip(sorted(steps, key=lambda e: int(STEP.fullmatch(e["name"])[1])), rows):  # type: ignore[index]
        n = int(STEP.fullmatch(step["name"])[1])  # type: ignore[index]
        _check(run_dir, n == row["iteration"], f"{files.TRACE} has slice {step['name']} where iteration "
               f"{row['iteration']} should be")
        _check(run_dir, abs(step["ts"] - row["start_s"] * 1e6) <= TRACE_ROUNDING_US,
               f"{files.TRACE}: {step['name']} starts at {step['ts']} µs, {files.ITERATIONS} at {row['start_s']} s")
        _check(run_dir, step.get("cat") == row["phase"], f"{files.TRACE}: {step['name']} is in {step.get('cat')!r}, "
               f"{files.ITERATIONS} in {row['phase']!r}")
        span = span_of[row["phase"]]
        _check(run_dir, span["ts"] <= step["ts"] and step["ts"] + step["dur"] <= span["ts"] + span["dur"] + 1e-3,
               f"{files.TRACE}: {step['name']} does not nest inside its {span['name']!r} span")
    starts = {s["ts"]: s for s in steps}
    for wait in waits:
        step = starts.get(wait["ts"])
        _check(run_dir, step is not None and wait["dur"] <= step["dur"] + 1e-3,
               f"{files.TRACE}: a data wait at {wait['ts']} µs is not inside an iteration")
    info = doc.get("distributedInfo") or {}
    _check(run_dir, info.get("world_size") == int(summary.get("world_size") or 1),
           f"{files.TRACE} names world size {info.get('world_size')}, the summary {summary.get('world_size') or 1}")
    rank = int(run_dir.name[4:]) if run_dir.parent.name == files.WORKERS and run_dir.name[4:].isdigit() else 0
    _check(run_dir, info.get("rank") == rank, f"{files.TRACE} names rank {info.get('rank')}, its folder rank {rank}")


# ---------------------------------------------------------------------------------------------------- mllog


def check_mllog(run_dir: Path, summary: dict[str, Any], rows: list[dict[str, Any]] | None) -> None:
    """mllog.txt: every line a :::MLLOG record; run_stop's status is the run's; the window's block and the
    samples trained agree with iterations.csv."""
    records: dict[str, dict[str, Any]] = {}
    for number, line in enumerate((run_dir / files.MLLOG).read_text().splitlines(), start=1):
        _check(run_dir, line.startswith(":::MLLOG "), f"{files.MLLOG} line {number} is not a :::MLLOG record")
        try:
            record = json.loads(line.removeprefix(":::MLLOG "))
        except ValueError:
            raise RunBroken(f"{run_dir.name}: {files.MLLOG} line {number} is not JSON") from None
        _check(run_dir, isinstance(record, dict) and {"key", "value", "time_ms", "metadata"} <= set(record),
               f"{files.MLLOG} line {number} lacks key, value, time_ms or metadata")
        records.setdefault(record["key"], record)
    for key in ("init_start", "run_start", "run_stop"):
        _check(run_dir, key in records, f"{files.MLLOG} has no {key}")
    stop = records["run_stop"]["metadata"]
    status = summary.get("status")
    _check(run_dir, stop.get("tbdkit_status") == status, f"{files.MLLOG}'s run_stop says {stop.get('tbdkit_status')}, "
           f"the summary {status}")
    _check(run_dir, stop.get("status") == ("success" if status in MEASURED else "aborted"),
           f"{files.MLLOG}'s run_stop status is {stop.get('status')} for a {status} run")
    window = summary.get("window") or {}
    if rows and window and "block_stop" in records:
        _check(run_dir, records["block_stop"]["metadata"].get("last_iteration") == window.get("last_iteration")
               and records["block_start"]["metadata"].get("first_iteration") == window.get("first_iteration"),
               f"{files.MLLOG}'s block is not the summary's window {window.get('first_iteration')}-"
               f"{window.get('last_iteration')}")
    if rows:
        processes = max(1, int(summary.get("world_size") or 1) // int(summary.get("replicas_per_process") or 1))
        trained = int(sum(r["samples"] for r in rows)) * processes
        got = (records.get("train_samples") or {}).get("value")
        _check(run_dir, got == trained, f"{files.MLLOG}'s train_samples is {got}, {files.ITERATIONS} gives {trained}")
    throughput = (summary.get("metrics") or {}).get("throughput")
    if isinstance(throughput, dict):
        logged = records.get("tbdkit_throughput") or {}
        _check(run_dir, logged.get("value") == throughput.get("value") and
               logged.get("metadata", {}).get("unit") == throughput.get("unit"),
               f"{files.MLLOG}'s tbdkit_throughput is {logged.get('value')}, the summary's {throughput.get('value')}")


# ---------------------------------------------------------------------------------------------------- index


def index_row(results: Path, run_id: str) -> dict[str, Any] | None:
    """The index's row of one run as stored (read-only: this reconciles nothing), or None."""
    with sqlite3.connect(f"file:{results / INDEX}?mode=ro", uri=True) as conn:
        conn.row_factory = sqlite3.Row
        found = conn.execute("SELECT * FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return dict(found) if found is not None else None


def check_index(run_dir: Path, summary: dict[str, Any], required: bool) -> None:
    """The index row equals the summary, field by field (tbdkit.results.index's columns)."""
    results = run_dir.parent
    if not (results / INDEX).is_file():
        _check(run_dir, not required, f"its results folder {results} has no {INDEX}")
        return
    row = index_row(results, run_dir.name)
    _check(run_dir, row is not None, f"{INDEX} has no row for it")
    assert row is not None
    # the row the kit makes of the summary (tbdkit.results.index.row_of), and its main fields read here again
    expected = {k: v for k, v in (row_of(run_dir) or {}).items() if k != "path"}
    throughput = (summary.get("metrics") or {}).get("throughput") or {}
    direct = {"status": summary.get("status"), "framework": summary.get("framework"),
              "batch_size": summary.get("batch_size"), "throughput": throughput.get("value")}
    _check(run_dir, {k: expected.get(k) for k in direct} == direct, f"the index's row of its summary is {expected}")
    differ = {k: (row.get(k), v) for k, v in expected.items() if row.get(k) != v}
    _check(run_dir, not differ, f"its {INDEX} row differs from its summary (index, summary): {differ}")


# ---------------------------------------------------------------------------------------------------- the run


def assert_run_holds(
    run_dir: Path | str, *, indexed: bool | None = None, launched: bool = True, worker: bool = False
) -> dict[str, Any]:
    """Every invariant of a run folder (the module's docstring); returns its checked summary.

    `indexed`: True when its results folder must hold an index with its row (a run made by `bench` or `sweep`),
    None to check the row where there is an index, False to skip it. `launched`: False for a folder the agent
    made alone (tbdkit.agent.run.execute in a test: no launcher's spec.json, log.txt, mllog.txt). `worker`: a
    data-parallel job's workers/rank<N>/ (no launcher's files, no index). Raises RunBroken (an AssertionError) on the first problem."""
    run_dir = Path(run_dir)
    _check(run_dir, run_dir.is_dir(), "is not a folder")
    try:
        summary = summaries.read(run_dir)
    except FileNotFoundError:
        raise RunBroken(f"{run_dir.name}: has no {files.SUMMARY}") from None
    except summaries.Unreadable as exc:
        raise RunBroken(f"{run_dir.name}: {exc.why}") from None
    status = summary["status"]
    _check(run_dir, status in summaries.STATUSES, f"status {status!r} is none of {summaries.STATUSES}")
    if status not in MEASURED:
        _check(run_dir, isinstance(summary.get("error"), str) and summary["error"].strip() != "",
               f"a {status} run's summary says no error")
    present = {p.name for p in run_dir.iterdir() if p.is_file()}
    spec = _json_object(run_dir, files.SPEC) if files.SPEC in present else None
    if spec is not None:
        for key in ("model", "framework", "batch_size", "precision", "preset"):
            _check(run_dir, spec.get(key) == summary.get(key),
                   f"spec.json's {key} is {spec.get(key)!r}, the summary's {summary.get(key)!r}")
    need = expected_files(run_dir, summary, spec, launched and not worker)
    missing = sorted(need - present)
    _check(run_dir, not missing, f"a {status} run lacks {', '.join(missing)}")
    _check(run_dir, not [n for n in present if n.endswith(".tmp")], "holds a .tmp file (a write that did not finish)")
    _parses(run_dir, present & files.RUN_FILES)
    check_metrics(run_dir, summary)
    check_analyses(run_dir, summary)
    rows = _iterations(run_dir) if files.ITERATIONS in present else None
    if rows is not None:
        check_window(run_dir, summary, rows)
        if files.TRACE in present:
            check_trace(run_dir, summary, rows)
    elif status in MEASURED and summary.get("preset") != "converge":  # converge trains without the loop's rows
        _fail(run_dir, f"a {status} run has no {files.ITERATIONS}")
    if files.MLLOG in present:
        check_mllog(run_dir, summary, rows)
    if not worker and indexed is not False:
        check_index(run_dir, summary, bool(indexed))
    ranks = sorted((run_dir / files.WORKERS).glob("rank*")) if (run_dir / files.WORKERS).is_dir() else []
    for rank in ranks:
        if rank.is_dir() and (rank / files.SUMMARY).is_file():
            assert_run_holds(rank, indexed=False, launched=False, worker=True)
    return summary
