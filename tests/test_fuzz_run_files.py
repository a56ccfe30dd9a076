"""Fuzz: random bytes and random JSON shapes in every run file, the sweep state and the index; the
read commands (runs, show, report, bundle, reproduce) answer without a traceback, through the CLI's
real entry point. A damaged file is named or skipped; nothing trains (no stack is installed)."""

from __future__ import annotations

import json
import os
import shutil
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from report_fixtures import make_run
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
    for args in (["runs", "-r", str(results)], ["runs", "-r", str(results), "--json"],
                 ["show", run.name, "-r", str(results)], ["show", "last", "-r", str(results), "--json"],
                 ["report", str(results), "-o", str(work / "report")],
                 ["bundle", str(results), "-o", str(bundle)],
                 ["reproduce", str(bundle), "-r", str(work / "again")]):
        if args[0] == "reproduce" and not bundle.is_file():
            continue
        _no_traceback(runner.invoke(app, args), args)
