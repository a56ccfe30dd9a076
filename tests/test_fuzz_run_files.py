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

# JSON's integers have no bound: one past a float's range (400 digits) is valid JSON that float() cannot hold
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.sampled_from([10**400, -10**400])
    | st.floats(allow_nan=True) | st.text(max_size=20),
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


# ---------------------------------------------------------------- numbers no writer of the kit makes

NOT_NUMBERS = [10**400, -10**400, math.nan, math.inf, -1, "many"]  # Python's json writes and reads NaN, Infinity


def _forge(path: Path, *where: str | int, value: object) -> None:
    data = json.loads(path.read_text())
    node = data
    for key in where[:-1]:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    node[where[-1]] = value
    path.write_text(json.dumps(data))


def test_numbers_past_a_floats_range_or_not_counts_are_read_as_unmeasured(tmp_path, monkeypatch):
    """A memory.json count of bytes, a spec.json count of workers or machines, env.json's SM count and clock, an
    FSDP2 rank's shard and a recorded peak FLOP/s, each a 400-digit integer, NaN, infinity, negative or text
    (valid JSON all, as Python reads it): the report, show and runs answer, and bundle names the forged specs; the
    memory table says those cells were not measured, and the run's other numbers stand. One folder of runs, one
    forged place each."""
    from tbdkit.report import modern
    from tbdkit.report import runs as report_runs
    from tbdkit.results import readers

    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path / "no-stacks"))
    assert readers.finite(10**400) is None and readers.finite(-10**400) is None and readers.finite(2**70) == 2.0**70
    results = tmp_path / "results"
    breakdown = {"weights": 2**20, "weight_gradients": 2**20, "feature_maps": 2**21, "workspace": 1, "dynamic": 1}
    for i, bad in enumerate(NOT_NUMBERS):
        run = make_run(results, "resnet50", "pytorch", 8 + i, 100.0 + i, device="cuda:0", device_name="NVIDIA Z9",
                       metrics={"gpu_utilization": 50.0}, memory=breakdown, started=f"2026-11-22T10:00:0{i}",
                       peak_flops=1e15)
        _forge(run / "memory.json", "categories", "feature_maps", "bytes", value=bad)
        _forge(run / "memory.json", "peak", "bytes", value=bad)
        for key in ("nodes", "world_size", "gpus_per_node"):
            _forge(run / "spec.json", key, value=bad)
        _forge(run / "env.json", "framework", "device_properties",
               value={"compute_capability": "9.0", "sm_count": bad, "max_sm_clock_mhz": bad})
        _forge(run / "summary.json", "metrics", "mfu", "peak_flops", value=bad)
        _forge(run / "summary.json", "metrics", "mfu", "mfu_other", value=bad)
        _forge(run / "summary.json", "metrics", "model_flops_per_sample", "flops_per_work", value=bad)
        _forge(run / "summary.json", "shard_memory", value={"unit": "bytes", "ranks": [
            {"weights": bad, "weight_gradients": 2**20, "optimizer_state": 2**21}, "rank one"]})
        forged = report_runs.from_dir(run)
        assert forged is not None and forged.memory_bytes("feature_maps") is None and forged.peak_memory_bytes is None
        assert forged.memory_bytes("weights") == 2**20 and (forged.nodes, forged.world_size, forged.gpus_per_node) == (1, 1, 1)
        assert forged.peak_flops() is None  # neither the recorded peak nor the properties: no datasheet row either
        # the modern table's cells (a Llama run's): the MFU without the other mode's, no TFLOP/s from a forged count
        assert modern.mfu_cell(forged) == "40.0 %" and modern.tflops_per_gpu(forged) is None  # -1 % is no share
    _forge(run / "summary.json", "metrics", "mfu", "value", value=-5.0)  # a negative MFU itself: none measured
    assert modern.mfu_cell(report_runs.from_dir(run)) == "— (not a share of a peak)"
    runner = CliRunner()
    for args in (["report", str(results), "-o", str(tmp_path / "report")], ["runs", "-r", str(results)],
                 ["show", "last", "-r", str(results)], ["bundle", str(results), "-o", str(tmp_path / "a.tar.gz")]):
        result = runner.invoke(app, args)
        _no_traceback(result, args)
        if args[0] == "bundle":  # bundle validates each spec.json: a forged one is named, never packed
            assert result.exit_code == 2 and "nothing to bundle" in result.output, result.output
        else:
            assert result.exit_code == 0, (args, result.output)
    md = (tmp_path / "report" / "report.md").read_text()
    # the memory table: weights and gradients 1 MiB each as written; feature maps and the peak forged, so unmeasured
    rows = [line.split(" | ", 1)[1] for line in md.splitlines() if line.startswith("| resnet50/pytorch b") and "MiB" not in line
            and "NVIDIA" not in line]
    assert rows == ["1.0 | 1.0 | — (not measured) | 0.0 | 0.0 | — (not measured) |"] * len(NOT_NUMBERS), md
    # the modern table's FSDP2 cell (a Llama run's): each rank's counts, '?' where the summary holds none
    assert modern.memory_cell(report_runs.from_dir(run)) == (
        "rank 0: weights ?, gradients 1.00, optimizer state 2.00 MiB; rank 1: weights ?, gradients ?, optimizer state ? MiB")


def test_a_summary_outside_what_a_run_can_be_is_unreadable_and_a_negative_spread_is_none(tmp_path):
    """summary.json with a batch size past a float's range (the figures' log axis cannot take it), a negative 95%
    half-width, a negative utilization: the report builds and draws; the first run is left out as unreadable, the
    others are drawn with no spread below zero."""
    from tbdkit.report import runs as report_runs

    results = tmp_path / "results"
    kept = {}
    for i, (where, bad) in enumerate([(("batch_size",), 10**400), (("world_size",), 0), (("nodes",), 65),
                                      (("metrics", "throughput", "ci95_half_width"), -1.0),
                                      (("metrics", "gpu_utilization", "value"), -1.0),
                                      (("metrics", "throughput", "ci95_relative"), -1.0)]):
        run = make_run(results, "resnet50", "pytorch", 8 * (i + 1), 100.0 + i, device="cuda:0", device_name="NVIDIA Z9",
                       metrics={"gpu_utilization": 50.0}, started=f"2026-11-22T10:00:0{i}")
        _forge(run / "summary.json", *where, value=bad)
        kept[where[-1]] = report_runs.from_dir(run)
    assert kept["batch_size"] is None and kept["world_size"] is None and kept["nodes"] is None  # a RunSpec's bounds
    assert kept["ci95_half_width"] is not None and kept["ci95_half_width"].ci95_half_width is None
    result = CliRunner().invoke(app, ["report", str(results), "-o", str(tmp_path / "report")])
    _no_traceback(result, ["report"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report" / "figures").is_dir()
    # the bundle's guide: a negative relative half-width is no interval (it read "±-100.0%")
    result = CliRunner().invoke(app, ["bundle", str(results), "-o", str(tmp_path / "a.tar.gz")])
    _no_traceback(result, ["bundle"])
    assert result.exit_code == 0, result.output
    guide = artifact.read(tmp_path / "a.tar.gz")[1]["ARTIFACT.md"].decode()
    (row,) = [line for line in guide.splitlines() if line.startswith("| 2026") and "-b48-" in line and "samples/s" in line]
    assert "(no CI: the floor alone)" in row and "±-" not in row, row


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
