"""A bundle cannot make `reproduce` run whatever it asks: every spec field is bounded (one sentence
each), every run is checked against this machine's cores and GPUs, and `reproduce` prints its plan
(runs, caps, expected time) and asks before it runs anything unless --yes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from model_checks import cli
from tbdkit.cli import app  # before tbdkit.bench (which imports the CLI's console)
from tbdkit.artifact import bundle as artifact
from tbdkit.bench import run_list
from tbdkit.core.errors import UserError
from tbdkit.spec import run_spec as specs
from tbdkit.spec import sweep_spec


@pytest.mark.parametrize("fields, words", [
    ({"measure": {"max_warmup_s": 1e6}}, "measure.max_warmup_s: a warm-up cap is a number of seconds above 0 and at most 3600, an hour"),
    ({"measure": {"max_warmup_s": float("inf")}}, "measure.max_warmup_s: a warm-up cap"),
    ({"measure": {"max_warmup_s": 1e308}}, "measure.max_warmup_s: a warm-up cap"),
    ({"measure": {"max_warmup_s": float("nan")}}, "measure.max_warmup_s: a warm-up cap"),
    ({"measure": {"max_measure_s": 1e6}}, "measure.max_measure_s: a sample window's cap"),
    ({"measure": {"max_warmup_iterations": 10**9}}, "measure.max_warmup_iterations: must be a whole number from 1 to 1,000,000"),
    ({"measure": {"max_measure_iterations": 10**9}}, "measure.max_measure_iterations: must be a whole number from 2"),
    ({"measure": {"min_warmup_iterations": 10**9}}, "measure.min_warmup_iterations"),
    ({"measure": {"warmup_window": 10**9}}, "measure.warmup_window: must be a whole number of iterations from 2 to 10,000"),
    ({"measure": {"sample_interval_s": 1e-12}}, "measure.sample_interval_s: the collectors sample every 0.01 to 60 s"),
    ({"measure": {"synthetic_pool": 10**12}}, "measure.synthetic_pool: must be a whole number of batches from 1 to 1024"),
    ({"measure": {"foreign_cpu_limit": 1e9}}, "measure.foreign_cpu_limit"),
    ({"batch_size": 2**62}, "batch_size: a batch size is a whole number from 1 to 65,536"),
    ({"memory_limit_mb": 2**40}, "memory_limit_mb: a memory cap is a whole number of MiB"),
    ({"nodes": 65, "launcher": "netns"}, "nodes: a job has 1 to 64 nodes"),
    ({"gpus_per_node": 1000}, "gpus_per_node: a node has 1 to 64 GPUs"),
    ({"cpus": 10**6}, "cpus: a run is given 1 to 4096 cores"),
    ({"link_rate": "999999999gbit", "launcher": "netns", "nodes": 2}, "link_rate: must be a tc rate from 1kbit to 400gbit"),
    ({"link_rate": "9" * 400 + "gbit", "launcher": "netns", "nodes": 2}, "link_rate: must be a tc rate"),
    ({"device": "cuda:99999999999999"}, "device: must be auto, cpu, cuda or cuda:N (N from 0 to 63)"),
    ({"data": "x" * 300}, "data: is neither 'synthetic' nor a path this machine can read"),
])
def test_every_spec_field_is_bounded_with_one_sentence(fields, words):
    with pytest.raises(UserError) as err:
        specs.build(**{"model": "resnet50", "batch_size": 2, **fields})
    message = str(err.value)
    assert message.startswith("Invalid run spec: ") and words in message, message
    assert message.count(";") == 0 and len(message) < 400  # one field, one sentence


def test_the_bounds_still_take_what_users_type():
    assert specs.build(model="resnet50", batch_size=65_536, measure={"max_warmup_s": 3600, "max_measure_s": 3600,
                                                                     "sample_interval_s": 0.01}).batch_size == 65_536
    assert specs.build(model="resnet50", batch_size=2, nodes=64, gpus_per_node=64, launcher="netns").world_size == 4096
    assert specs.build(model="resnet50", batch_size=2, nodes=2, launcher="netns", link_rate="400gbit").link_rate


def test_a_sweep_is_bounded_too(tmp_path):
    base = {"model": "resnet50", "frameworks": ["pytorch"], "batches": [2], "results": str(tmp_path)}
    for over, words in (({"batches": [2**62]}, "batches: batch sizes are whole numbers from 1 to 65,536"),
                        ({"measure": {"sample_interval_s": 1e-12}}, "measure.sample_interval_s"),
                        ({"cv_limit": float("inf")}, "cv_limit: must be a fraction above 0 and below 1")):
        with pytest.raises(UserError, match=words.replace("(", r"\(")):
            sweep_spec.parse({**base, **over})


def test_a_job_larger_than_this_machine_is_refused_before_it_runs(monkeypatch):
    from tbdkit.env import cpus, machine

    monkeypatch.setattr(cpus, "available", lambda *a, **k: 2)
    monkeypatch.setattr(machine, "gpu_count", lambda: 0)
    big = specs.build(model="resnet50", batch_size=2, nodes=64, gpus_per_node=64, launcher="netns")
    why = specs.fits_here(big)
    assert why is not None and "4096 worker processes on the CPU" in why and "at most 4 (2 per core)" in why
    assert specs.fits_here(specs.build(model="resnet50", batch_size=2, gpus_per_node=4)) is None
    monkeypatch.setattr(machine, "gpu_count", lambda: 8)
    why = specs.fits_here(big)
    assert why is not None and "need 4096 GPUs and this machine has 8" in why
    with pytest.raises(UserError, match="need 4096 GPUs"):
        run_list.run_all([big], Path("unused"), "x")


def test_bench_refuses_an_infinite_cap_in_one_sentence(tmp_path):
    for value in ("inf", "1e308", "nan"):
        proc = cli("bench", "--model", "resnet50", "--framework", "pytorch", "--device", "cpu", "--batch", "2",
                      "--max-warmup-s", value, "--results", str(tmp_path / "r"), env={"COLUMNS": "300"})
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error: Invalid run spec: measure.max_warmup_s: a warm-up cap"), proc.stderr
        assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()


# ---------------------------------------------------------------- reproduce's plan and question


def _bundle(tmp_path: Path, spec: dict, wall_s: float | None = 95.0) -> Path:
    run = tmp_path / "results" / "r1"
    run.mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps(spec))
    summary = {"run_id": "r1", "status": "ok", "model": spec["model"], "framework": "pytorch",
               "batch_size": spec["batch_size"], "metrics": {}}
    if wall_s is not None:
        summary["wall_s"] = wall_s
    (run / "summary.json").write_text(json.dumps(summary))
    out = tmp_path / "a.tar.gz"
    artifact.bundle(tmp_path / "results", out)
    return out


@pytest.fixture
def ran(monkeypatch):
    calls: list[object] = []

    def fake_run_all(run_specs, results, unit, quiet_stdout=False):
        calls.append(run_specs)
        return [{"run_id": "new", "status": "ok", "metrics": {}} for _ in run_specs]

    monkeypatch.setattr(run_list, "run_all", fake_run_all)
    return calls


def _reproduce(bundle: Path, tmp_path: Path, *args: str, answer: str | None = None):
    return CliRunner().invoke(app, ["reproduce", str(bundle), "--results", str(tmp_path / "new"), *args],
                              input=answer, env={"COLUMNS": "300"})


def test_reproduce_prints_its_plan_and_asks_before_running(tmp_path, ran):
    bundle = _bundle(tmp_path, {"model": "resnet50", "framework": "pytorch", "batch_size": 2, "preset": "smoke",
                                "measure": {"max_warmup_s": 30, "max_measure_s": 45}})
    said_no = _reproduce(bundle, tmp_path, answer="n\n")
    assert said_no.exit_code == 1 and ran == [] and "nothing was run" in said_no.output
    assert "the plan" in said_no.output and "warm-up <= 30 s, window <= 45 s" in said_no.output
    assert "95 s" in said_no.output and "1 run(s), about 95 s" in said_no.output
    assert "Run these 1 run(s) here" in said_no.output
    no_answer = _reproduce(bundle, tmp_path)  # stdin closed: a no, said in one sentence
    assert no_answer.exit_code == 2 and ran == [] and "pass --yes" in no_answer.output
    said_yes = _reproduce(bundle, tmp_path, answer="y\n")
    assert said_yes.exit_code == 0 and len(ran) == 1, said_yes.output
    without_asking = _reproduce(bundle, tmp_path, "--yes")
    assert without_asking.exit_code == 0 and len(ran) == 2 and "Run these" not in without_asking.output
    assert "the plan" in without_asking.output


def test_reproduce_plans_with_the_caps_where_no_wall_time_was_recorded(tmp_path, ran):
    bundle = _bundle(tmp_path, {"model": "resnet50", "framework": "pytorch", "batch_size": 2, "preset": "paper"},
                     wall_s=None)
    out = _reproduce(bundle, tmp_path, "--yes")
    assert out.exit_code == 0, out.output
    assert "warm-up <= 120 s, window <= 180 s" in out.output and "about 5 min" in out.output


@pytest.mark.parametrize("spec, words", [
    ({"nodes": 64, "gpus_per_node": 64, "launcher": "netns"}, "cannot run here: 64 node(s) x 64 worker(s)"),
    ({"measure": {"max_warmup_s": 1e6}}, "measure.max_warmup_s: a warm-up cap"),
    ({"batch_size": 2**62}, "batch_size: a batch size is a whole number"),
])
def test_reproduce_refuses_a_bundle_that_asks_too_much_before_asking(tmp_path, ran, monkeypatch, spec, words):
    from tbdkit.env import machine

    monkeypatch.setattr(machine, "gpu_count", lambda: 0)
    base = {"model": "resnet50", "framework": "pytorch", "batch_size": 2}
    run = tmp_path / "results" / "r1"
    run.mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps({**base, **spec}))
    (run / "summary.json").write_text(json.dumps({"run_id": "r1", "status": "ok", "model": "resnet50",
                                                  "framework": "pytorch", "batch_size": 2}))
    # a bundle made by hand (a bundle of this kit lists such a run as broken: its spec is not valid)
    files = {n: p.read_bytes() for n, p in (("results/r1/spec.json", run / "spec.json"),
                                            ("results/r1/summary.json", run / "summary.json"))}
    manifest = {"format": artifact.FORMAT, "files": {n: {"sha256": artifact.sha256(d), "bytes": len(d)}
                                                     for n, d in files.items()}}
    bundle = tmp_path / "hand.tar.gz"
    artifact.write_archive(bundle, [(artifact.MANIFEST, json.dumps(manifest).encode()), *files.items()])
    out = _reproduce(bundle, tmp_path, answer="y\n")
    assert out.exit_code == 2 and ran == [] and words in out.output, out.output
    assert "Run these" not in out.output and "Traceback" not in out.output
