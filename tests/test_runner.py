"""The one runner of bench, sweep, reference and reproduce (tbdkit/bench/runner.py): every spec checked against
this machine once, each launcher's preflight once per framework and device, each run indexed as it ends, and
a job's scaling efficiency computed as its run folder is finished (tbdkit.analysis.scaling), not afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tbdkit import launch
from tbdkit.analysis.scaling import scaling_efficiency
from tbdkit.bench.runner import Runner, check
from tbdkit.core.errors import UserError
from tbdkit.launch.outcome import Outcome
from tbdkit.results.index import Index
from tbdkit.spec import run_spec as specs
from tests.test_store import make_run


def spec(framework: str = "pytorch", batch: int = 2, **more) -> specs.RunSpec:
    return specs.build(model="deepspeech2", framework=framework, batch_size=batch, preset="smoke", device="cpu", **more)


def test_each_preflight_runs_once_and_each_run_is_indexed(tmp_path, monkeypatch):
    asked: list[tuple[str, bool]] = []

    def fake_launch(s, where, on_event, chosen, preflight, index):
        asked.append((s.framework, preflight))
        run_dir = make_run(Path(where), f"20260101-00000{len(asked)}-r")
        return Outcome(run_dir, "ok", json.loads((run_dir / "summary.json").read_text()))

    monkeypatch.setattr(launch, "launch", fake_launch)
    with Index(tmp_path) as index:
        runner = Runner(tmp_path, index)
        for s in (spec(), spec(batch=4), spec("tensorflow"), spec(batch=8)):
            runner.run(s, lambda event: None)
        probe = runner.run(spec(), lambda event: None, tmp_path / "probes", indexed=False)
        planned = Runner(tmp_path, index, preflighted=True)  # the command's plan ran them (bench, sweep)
        planned.run(spec(), lambda event: None)
    assert asked == [("pytorch", True), ("pytorch", False), ("tensorflow", True), ("pytorch", False),
                     ("pytorch", False), ("pytorch", False)]
    assert len(Index(tmp_path).runs()) == 5 and probe.run_dir.parent == tmp_path / "probes"


def test_a_spec_that_does_not_fit_is_refused_in_the_callers_words(monkeypatch):
    from tbdkit.env import cpus

    monkeypatch.setattr(cpus, "available", lambda: 1)
    fits, too_many = spec(), spec(cpus=2)
    assert list(check([fits])) == [fits]
    with pytest.raises(UserError, match=r"^The run r2 cannot run here: --cpus 2 asks for more cores"):
        check([fits, too_many], lambda n, why: f"The run r{n + 1} cannot run here: {why}.")


def test_scaling_efficiency_is_a_function_of_the_job_and_the_index_rows():
    job = {"status": "ok", "model": "m", "framework": "pytorch", "batch_size": 4, "precision": "fp32",
           "device": "cpu", "world_size": 2, "metrics": {"aggregate_throughput": {"value": 30.0}}}
    single = {"run_id": "one", "status": "ok", "model": "m", "framework": "pytorch", "batch_size": 4,
              "precision": "fp32", "device": "cpu", "world_size": 1, "throughput": 20.0, "started_utc": "t"}
    assert scaling_efficiency(job, [single])["value"] == 75.0
    assert scaling_efficiency(job, [single])["baseline_run"] == "one"
    assert "single-worker run" in scaling_efficiency(job, [{**single, "batch_size": 8}])["reason"]
    assert scaling_efficiency({**job, "world_size": 1}, [single]) is None
    assert scaling_efficiency({**job, "status": "failed"}, [single]) is None
