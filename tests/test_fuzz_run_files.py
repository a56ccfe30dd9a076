"""Fuzz: random bytes and random JSON shapes in every run file, the sweep state and the index; the
read commands (runs, show, report, bundle, reproduce) answer without a traceback, through the CLI's
real entry point. A damaged file is named or skipped; nothing trains (no stack is installed). The report of a
damaged folder is drawn once, by `tbdkit report`: `bundle` packs that one, the same builder's output for the same
folder, instead of drawing it again (the figures are most of each example's cost). And
`compare` on sides holding numbers that are not rates (zero, negative, NaN, infinite): no verdict."""

from __future__ import annotations

import json
import math
import os
import shutil
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from report_fixtures import make_run
from tbdkit.artifact import bundle as artifact
from tbdkit.cli import app

RUN_FILES = ("summary.json", "env.json", "spec.json", "memory.json", "kernels.csv", "iterations.csv",
             "samples.csv", "log.txt")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12)


def _mutated(base: dict, key_path: list[str], value: object) -> dict:
    """`base` with the value at one (possibly new) key path replaced."""
    out = json.loads(json.dumps(base))
    node = out
    for key in key_path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[key_path[-1]] = value
    return out


KEY_PATHS = [["status"], ["model"], ["framework"], ["batch_size"], ["device"], ["run_id"], ["metrics"],
             ["metrics", "throughput"], ["metrics", "throughput", "value"], ["metrics", "throughput", "unit"],
             ["metrics", "gpu_utilization", "reason"], ["window"], ["window", "seconds"], ["world_size"],
             ["framework", "device_name"], ["cpu"], ["gpu", "name"], ["categories"], ["categories", "weights"],
             ["points"], ["groups"], ["sweep_id"]]

contents = st.one_of(
    st.binary(max_size=300).map(lambda b: ("bytes", b)),
    json_values.map(lambda v: ("json", json.dumps(v).encode())),
    st.tuples(st.sampled_from(KEY_PATHS), json_values).map(lambda kv: ("mutate", kv)),
)

TARGETS = [*RUN_FILES, "index.sqlite", "sweep.json"]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    results = tmp_path_factory.mktemp("pristine") / "results"
    make_run(results, "deepspeech2", "pytorch", 2, 10.0, memory={"weights": 1, "weight_gradients": 1,
             "feature_maps": 1, "workspace": 1, "dynamic": 1},
             kernels=[{"kernel": "k", "calls": 1, "total_time_us": 1.0, "time_share": 1.0, "mean_time_us": 1.0,
                       "method": "fixture"}])
    make_run(results, "deepspeech2", "pytorch", 4, 18.0, started="2026-11-22T10:00:01")
    sweeps = results / "sweeps" / "s1"
    sweeps.mkdir(parents=True)
    (sweeps / "sweep.json").write_text(json.dumps({"sweep_id": "s1", "points": {}, "groups": {}}))
    return results


def _no_traceback(result, args):
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        text = "".join(traceback.format_exception(result.exception))
        raise AssertionError(f"tbdkit {' '.join(args)} raised:\n{text}\n{result.output}")
    assert "Traceback" not in result.output, (args, result.output)


def _the_report_made(made: Path, build):
    """bundle's report builder, answering with the report `tbdkit report` made of the same folder (built with the
    defaults bundle uses) when there is one, else building it as bundle does."""

    def build_report_into(results: Path, out_dir: Path) -> dict:
        if not (made / "report.html").is_file():
            return build(results, out_dir)
        shutil.copytree(made, out_dir, dirs_exist_ok=True)
        return {"included": True, "path": "report/report.html"}

    return build_report_into


# 12 examples keep it well under a minute; TBDKIT_FUZZ_EXAMPLES=500 searches harder.
@settings(max_examples=int(os.environ.get("TBDKIT_FUZZ_EXAMPLES", "12")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(target=st.sampled_from(TARGETS), content=contents)
def test_damaged_run_files_never_give_a_traceback(pristine, tmp_path_factory, monkeypatch, target, content):
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path_factory.mktemp("no-stacks")))  # nothing can train
    work = tmp_path_factory.mktemp("fuzz")
    results = work / "results"
    shutil.copytree(pristine, results)
    run = sorted(p for p in results.iterdir() if p.is_dir() and p.name != "sweeps")[0]
    path = {"index.sqlite": results / "index.sqlite", "sweep.json": results / "sweeps" / "s1" / "sweep.json"}.get(
        target, run / target)
    kind, value = content
    if kind == "mutate":
        try:
            base = json.loads(path.read_text()) if path.is_file() else {}
        except ValueError:
            base = {}
        data = json.dumps(_mutated(base if isinstance(base, dict) else {}, *value)).encode()
    else:
        data = value
    path.write_bytes(data)
    runner = CliRunner()
    bundle = work / "artifact.tar.gz"
    monkeypatch.setattr(artifact, "build_report_into", _the_report_made(work / "report", artifact.build_report_into))
    for args in (["runs", "-r", str(results)], ["runs", "-r", str(results), "--json"],
                 ["show", run.name, "-r", str(results)], ["show", "last", "-r", str(results), "--json"],
                 ["report", str(results), "-o", str(work / "report")],
                 ["bundle", str(results), "-o", str(bundle)],
                 ["reproduce", str(bundle), "-r", str(work / "again")]):
        if args[0] == "reproduce" and not bundle.is_file():
            continue
        _no_traceback(runner.invoke(app, args), args)


# ---------------------------------------------------------------- compare on numbers that are not rates

GARBAGE = [0.0, -0.0, -1.0, -5.0, math.nan, math.inf, -math.inf, 1e-320, 1e308]


def _compared_run(root: Path, name: str, rate: float, field: str | None, value: float) -> Path:
    """A finished run of 6 window iterations (iterations.csv and summary.json) with `value` put in one
    place: an iteration's seconds or work, or the summary's throughput or its 95% half-width."""
    run = root / name
    run.mkdir(parents=True)
    works = [2.0, 3.0, 5.0, 2.0, 3.0, 5.0]
    times = [w / rate * (1 + 0.01 * i) for i, w in enumerate(works)]
    if field in ("seconds", "work"):
        (times if field == "seconds" else works)[2] = value
    with (run / "iterations.csv").open("w") as fh:
        fh.write("iteration,phase,start_s,seconds,data_wait_s,samples,work,loss\n")
        fh.writelines(f"{i + 1},measure,0,{t!r},0,2,{w!r},1.0\n" for i, (w, t) in enumerate(zip(works, times)))
    throughput = {"value": value if field == "throughput" else rate, "unit": "audio_s/s", "method": "m",
                  "ci95_half_width": value if field == "ci95_half_width" else 0.01 * rate}
    summary = {"run_id": name, "status": "ok", "model": "deepspeech2", "framework": "pytorch", "batch_size": 2,
               "precision": "fp32", "preset": "smoke", "device": "cpu", "metrics": {"throughput": throughput},
               "window": {"first_iteration": 1, "last_iteration": 6, "iterations": 6, "seconds": sum(times),
                          "stop_reason": "time_cap"}}
    (run / "summary.json").write_text(json.dumps(summary))  # NaN and Infinity as Python's json writes them
    return run


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> object:
        raise AssertionError(f"--json wrote {constant}, which is not JSON")
    return json.loads(text, parse_constant=refuse)


@settings(max_examples=int(os.environ.get("TBDKIT_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(field=st.sampled_from(["seconds", "work", "throughput", "ci95_half_width"]),
       value=st.sampled_from(GARBAGE) | st.floats(), side=st.sampled_from(["A", "B"]), repeats=st.booleans(),
       as_json=st.booleans(), level=st.sampled_from(["0.95", "0.9999", "0.999999999999"]))
def test_compare_gives_no_verdict_on_numbers_that_are_not_finite_positive_rates(tmp_path_factory, field, value, side,
                                                                                 repeats, as_json, level):
    """Zero, negative, NaN or infinite seconds, work or throughput in either side (one run a side, or three
    and three): no verdict, one sentence, exit 2; a verdict only on numbers that are rates, its --json JSON."""
    root = tmp_path_factory.mktemp("compare")
    n = 3 if repeats else 1
    a = [_compared_run(root, f"a{i}", 10.0 + i * 0.1, field if side == "A" and i == 0 else None, value)
         for i in range(n)]
    b = [_compared_run(root, f"b{i}", 12.0 - i * 0.1, field if side == "B" and i == 0 else None, value)
         for i in range(n)]
    args = ["compare", *map(str, a), *(arg for run in b for arg in ("--against", str(run))), "--level", level]
    args += ["--json"] if as_json else []
    result = CliRunner().invoke(app, args)
    _no_traceback(result, args)
    garbage = not (math.isfinite(value) and value > 0)
    if field == "ci95_half_width":  # beside iterations.csv the recorded CI is not used; a non-number is unreadable
        garbage = not math.isfinite(value)
    if garbage or level == "0.999999999999":
        assert result.exit_code == 2, (args, value, result.output)
        assert any(w in result.output for w in ("unreadable", "no verdict", "not a confidence level")), result.output
        return
    if result.exit_code == 0 and as_json:
        data = _strict_json(result.stdout)
        assert isinstance(data, dict) and data["verdict"] in ("faster", "slower", "same within noise")
        assert all(math.isfinite(x) for x in (data["ratio"], *data["interval"], data["throughput_a"]))
    else:  # a rate at the edge of what a float holds: a verdict, or one sentence saying why there is none
        assert result.exit_code in (0, 2), (args, value, result.output)
