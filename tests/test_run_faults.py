"""Faults around a run: a full disk, an agent killed by SIGKILL, a sweep killed mid-run. Each keeps
what was measured and says where, in one sentence, without a traceback. The runs are the machinery check's
(`mlp_numpy` on the NumPy stack, the kit's own environment): the faults are the kit's, not a framework's."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from killed_writes import killed_mid_write

from tbdkit.bench.sweep import RunResult, SweepRun
from tbdkit.core.errors import UserError
from tbdkit.launch.outcome import finalize
from tbdkit.results import sink
from tbdkit.spec.run_spec import RunSpec
from tbdkit.spec.sweep_spec import parse

SPEC = RunSpec(model="mlp_numpy", framework="numpy", batch_size=2, device="cpu", preset="smoke")


def agents_summary(run_dir: Path, status: str = "ok") -> dict:
    return {"run_id": run_dir.name, "status": status, "model": "mlp_numpy", "framework": "numpy",
            "batch_size": 2, "error": None,
            "metrics": {"throughput": {"value": 3.5, "unit": "samples/s", "method": "test"}}}


@pytest.fixture
def full_disk(monkeypatch, tmp_path):
    """Every write under tmp_path/'results' fails as a full disk does; the system temp folder works."""
    results = tmp_path / "results"
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    real = sink.write_text

    def write_text(path: Path, text: str) -> None:
        if results in Path(path).parents:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, text)

    monkeypatch.setattr(sink, "write_text", write_text)
    return results


def test_a_summary_the_disk_refuses_is_kept_in_the_temp_folder_and_the_user_told(full_disk, tmp_path):
    from tbdkit.agent.run import _write_summary

    run_dir = full_disk / "20260101-000000-mlp_numpy-numpy-b2-fp32-abcd"
    run_dir.mkdir(parents=True)
    _write_summary(run_dir, agents_summary(run_dir))  # the agent, at the end of its run
    kept = tmp_path / "tmp" / "tbdkit-unsaved" / run_dir.name / "summary.json"
    assert json.loads(kept.read_text())["metrics"]["throughput"]["value"] == 3.5
    events: list[dict] = []
    status, summary = finalize(run_dir, SPEC, 0, events.append)  # the launcher finds it there
    assert status == "ok" and summary["metrics"]["throughput"]["value"] == 3.5
    (warning,) = [e for e in events if e["event"] == "warning"]
    assert warning["message"] == f"the results disk refused summary.json; the run's summary is kept at {kept}"


def test_an_agent_that_wrote_nothing_on_a_full_disk_still_gets_a_summary_somewhere(full_disk, tmp_path):
    run_dir = full_disk / "20260101-000000-x"
    run_dir.mkdir(parents=True)
    events: list[dict] = []
    status, summary = finalize(run_dir, SPEC, 1, events.append)
    assert status == "failed" and "exited with code 1" in summary["error"]
    assert (tmp_path / "tmp" / "tbdkit-unsaved" / run_dir.name / "summary.json").is_file()
    assert "kept at" in events[-1]["message"]


def test_a_run_checks_the_free_space_before_training(monkeypatch, tmp_path):
    import shutil

    from tbdkit.launch import launch
    from tbdkit.results import space

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(space.shutil, "disk_usage", lambda p: usage._replace(free=3 * 2**20))
    with pytest.raises(UserError, match=r"Only 3 MiB are free where the results go .* a run folder can take up to "
                                        r"\d+ MiB: free some space or pass another --results\."):
        launch(SPEC, tmp_path / "results", lambda e: None)
    assert not list((tmp_path / "results").iterdir())  # no run folder was made
    assert space.run_folder_bytes(SPEC) > space.FIXED


def test_iteration_rows_reach_the_file_as_they_are_measured(tmp_path):
    rows = sink.StreamedRows(tmp_path / "iterations.csv", lambda i: {"iteration": i, "seconds": 0.5})
    for i in range(3):
        rows.append(i)
        # before anything closes it (a SIGKILL now would keep these rows)
        assert (tmp_path / "iterations.csv").read_text().splitlines() == ["iteration,seconds",
                                                                          *[f"{j},0.5" for j in range(i + 1)]]
    assert list(rows) == [0, 1, 2] and rows[1:] == [1, 2]


def test_an_agent_killed_by_a_signal_is_failed_naming_it_and_the_rows_kept(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "iterations.csv").write_text("iteration,phase\n0,warmup\n1,warmup\n2,measure\n")
    status, summary = finalize(run_dir, SPEC, -9)
    assert status == "failed" and summary["signal"] == "SIGKILL"
    assert summary["error"] == ("the agent was killed by SIGKILL before writing its results; iterations.csv keeps "
                                "the 3 iteration(s) it measured; see log.txt")


def test_an_agent_killed_mid_write_leaves_no_half_file_and_the_summary_says_which(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "iterations.csv").write_text("iteration,phase\n0,warmup\n")
    killed_mid_write(run_dir / "iterations.csv")
    status, summary = finalize(run_dir, SPEC, -9)
    assert status == "failed" and not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    assert summary["error"] == ("the agent was killed by SIGKILL before writing its results; iterations.csv keeps "
                                "the 1 iteration(s) it measured; its unfinished write of iterations.csv was removed; "
                                "see log.txt")
    # a job's second worker killed while writing its own summary: its folder too, and both are named
    (run_dir / "summary.json").unlink()
    killed_mid_write(run_dir / "iterations.csv")
    killed_mid_write(run_dir / "workers" / "rank1" / "summary.json")
    _, summary = finalize(run_dir, SPEC, -9)
    assert not list(run_dir.rglob("*.tmp"))
    assert "its unfinished writes of iterations.csv, workers/rank1/summary.json were removed" in summary["error"]
    assert (run_dir / "iterations.csv").read_text() == "iteration,phase\n0,warmup\n"  # the old file, whole



def test_a_killed_workers_unfinished_write_is_removed_once_every_process_ended_and_named_in_the_error(tmp_path):
    """Rank 0 wrote its failed summary (its peer went away); rank 1 was killed mid-write. Only a finish that
    knows every process of the job has ended (the kit's launchers, a Slurm job after srun) removes the file."""
    run_dir = tmp_path / "r"
    (run_dir / "workers" / "rank1").mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({**agents_summary(run_dir, "failed"), "metrics": {},
                                                      "error": "PeerLost: worker rank 1 went away"}))
    half = killed_mid_write(run_dir / "workers" / "rank1" / "iterations.csv")
    _, summary = finalize(run_dir, SPEC, 1, ended=False)  # node 0 of a Kubernetes job: node 1 may write on
    assert half.is_file() and summary["error"] == "PeerLost: worker rank 1 went away"
    status, summary = finalize(run_dir, SPEC, 1)
    assert status == "failed" and not half.exists()
    assert summary["error"] == ("PeerLost: worker rank 1 went away; its unfinished write of "
                                "workers/rank1/iterations.csv was removed")
    assert json.loads((run_dir / "summary.json").read_text())["error"] == summary["error"]
    # a measured run's summary is left as the agent wrote it
    (run_dir / "summary.json").write_text(json.dumps(agents_summary(run_dir)))
    half = killed_mid_write(run_dir / "workers" / "rank1" / "iterations.csv")
    status, summary = finalize(run_dir, SPEC, 0)
    assert status == "ok" and summary["error"] is None and not half.exists()

def sweep_spec(tmp_path: Path):
    return parse({"model": "mlp_numpy", "frameworks": ["numpy"], "batches": [2, 4], "precisions": ["fp32"],
                  "device": "cpu", "results": str(tmp_path / "results")})


class Killed(BaseException):
    """Stands for the sweep process dying by SIGKILL: nothing after it runs."""


def test_a_sweep_killed_mid_run_records_the_attempt_and_a_resume_reports_it(tmp_path):
    spec = sweep_spec(tmp_path)
    made: list[Path] = []

    def runner(run_spec, where, probe):
        run_dir = where / f"run-b{run_spec.batch_size}"
        run_dir.mkdir(parents=True)
        made.append(run_dir)
        sweep.run_dir_created(run_dir)  # what the launcher's run_dir event does
        if run_spec.batch_size == 4:
            raise Killed  # killed while batch 4 trains: its folder has no summary
        summary = agents_summary(run_dir)
        (run_dir / "summary.json").write_text(json.dumps(summary))
        return RunResult("ok", run_dir.name, run_dir, summary)

    sweep = SweepRun(spec, runner)
    with pytest.raises(Killed):
        sweep.run()
    on_disk = json.loads((spec.state_dir() / "sweep.json").read_text())
    (attempt,) = on_disk["points"]["numpy/fp32/b4/r0"]["attempts"]
    assert attempt["run_id"] == "run-b4" and attempt["status"] == "running"
    resumed = SweepRun(sweep_spec(tmp_path))
    assert resumed.state.recovered == ["numpy/fp32/b4/r0: the sweep was killed during run run-b4, marked killed "
                                       "(retried)"]
    point = resumed.state.points["numpy/fp32/b4/r0"]
    assert point["status"] == "killed" and point["attempts"][0]["note"].endswith("its run folder has no summary")
    # a run that finished before the sweep died is taken from its folder
    (made[-1] / "summary.json").write_text(json.dumps(agents_summary(made[-1])))
    on_disk["points"]["numpy/fp32/b4/r0"]["attempts"][0]["status"] = "running"
    (spec.state_dir() / "sweep.json").write_text(json.dumps(on_disk))
    resumed = SweepRun(sweep_spec(tmp_path))
    assert resumed.state.points["numpy/fp32/b4/r0"]["status"] == "ok"
    assert resumed.state.recovered[0].endswith("marked ok")


def test_a_stop_in_warm_up_s_last_iteration_ends_the_run_before_its_window_starts():
    """The launcher killed (or Ctrl-C) during the last warm-up iteration: the stop is seen before the window's
    collectors start (they would look for the launcher, gone by then: NoSuchProcess and a failed run), and the
    run ends interrupted. Deterministic: the stop comes from inside warm-up's last step."""
    import itertools
    from types import SimpleNamespace

    from tbdkit.agent.loop import StopRequested, TrainingLoop
    from tbdkit.spec.run_spec import MeasurePolicy

    asked = []

    class Adapter:
        cuda_index = None
        calls = 0

        def prepare(self, batch):
            return batch

        def step(self, inputs):
            self.calls += 1
            if self.calls == 3:  # warm-up's third and last iteration: the stop comes while it trains
                asked.append("SIGTERM")
            return 1.0

        def loss_value(self, loss):
            return float(loss)

    class Watching:
        name = "watching"
        started = 0

        def start(self):
            self.started += 1

        def sample(self):
            return {}

        def stop(self):
            return {}

    watching = Watching()
    policy = MeasurePolicy(min_warmup_iterations=3, warmup_window=2, max_warmup_iterations=3, min_measure_iterations=2)
    loop = TrainingLoop(Adapter(), itertools.repeat(SimpleNamespace(samples=1, work=1.0)), policy, lambda: bool(asked),
                        collectors=[watching])
    loop.warm_up()
    assert loop.result.warmup["iterations"] == 3 and asked == ["SIGTERM"]
    with pytest.raises(StopRequested):
        loop.measure()
    assert watching.started == 0 and len(loop.result.iterations) == 3


# A sweep process whose runs train until told on stdin: it owns the sweep meanwhile.
LIVE_SWEEP = """
import json, sys
from tbdkit.bench.sweep import RunResult, SweepRun
from tbdkit.spec.sweep_spec import parse

def runner(run_spec, where, probe):
    run_dir = where / f"run-b{run_spec.batch_size}"
    run_dir.mkdir(parents=True)
    sweep.run_dir_created(run_dir)
    print("training", run_dir.name, flush=True)
    sys.stdin.readline()
    summary = {"run_id": run_dir.name, "status": "ok", "model": "mlp_numpy", "framework": "numpy",
               "batch_size": run_spec.batch_size, "metrics": {"throughput": {"value": 3.5, "unit": "samples/s"}}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return RunResult("ok", run_dir.name, run_dir, summary)

sweep = SweepRun(parse(json.loads(sys.argv[1])), runner)
sweep.run()
"""


def test_a_second_sweep_of_a_live_sweep_is_refused_and_leaves_its_run_alone(tmp_path):
    """Two processes on one sweep: the second is refused in one sentence while the first lives (it
    used to mark the first's live run killed and train its point again); once the first ends, the
    sweep is free again."""
    import subprocess
    import sys

    from tbdkit.cli.sweep import run_sweep

    fields = {"model": "mlp_numpy", "frameworks": ["numpy"], "batches": [2, 4], "precisions": ["fp32"],
              "device": "cpu", "results": str(tmp_path / "results")}
    live = subprocess.Popen([sys.executable, "-c", LIVE_SWEEP, json.dumps(fields)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout is not None and live.stdin is not None
        assert live.stdout.readline().split() == ["training", "run-b2"]
        state = sweep_spec(tmp_path).state_dir() / "sweep.json"
        before = state.read_bytes()
        refusal = rf"The sweep {sweep_spec(tmp_path).sweep_id()} is already running in another process \(pid {live.pid}\): "
        with pytest.raises(UserError, match=refusal + "wait for it to end or stop it, then run the same command again"):
            SweepRun(sweep_spec(tmp_path))
        with pytest.raises(UserError, match=refusal):  # what `tbdkit sweep` runs, before it prints a note
            run_sweep(sweep_spec(tmp_path), "samples/s")
        assert state.read_bytes() == before
        attempt = json.loads(before)["points"]["numpy/fp32/b2/r0"]["attempts"]
        assert [(a["run_id"], a["status"]) for a in attempt] == [("run-b2", "running")]
        live.stdin.write("\n")
        live.stdin.flush()
        assert live.stdout.readline().split() == ["training", "run-b4"]
        live.stdin.write("\n")
        live.stdin.close()
        assert live.wait(timeout=60) == 0
    finally:
        live.kill()
        live.wait()
    after = SweepRun(sweep_spec(tmp_path))  # the owner is gone: the sweep is free, nothing was recovered
    assert after.state.recovered == []
    assert [len(p["attempts"]) for p in after.state.points.values()] == [1, 1]
    assert {p["status"] for p in after.state.points.values()} == {"ok"}


def test_a_real_agent_killed_by_sigkill_keeps_its_iterations(tmp_path):
    """The machinery check (smoke, CPU) through the native launcher; SIGKILL to the agent once it measures."""
    import signal

    import psutil

    from tbdkit.launch import launch

    spec = RunSpec(model="mlp_numpy", framework="numpy", batch_size=2, device="cpu", preset="smoke",
                   measure={"max_warmup_s": 0.5, "max_measure_s": 120, "target_ci": 0.0001})  # warm-up capped: the kill is what is tested
    seen = {"measuring": 0}

    def on_event(event: dict) -> None:
        if event.get("event") == "progress" and event.get("phase") == "measuring":
            seen["measuring"] += 1
            if seen["measuring"] == 3:
                for child in psutil.Process().children(recursive=True):
                    child.send_signal(signal.SIGKILL)

    outcome = launch(spec, tmp_path / "results", on_event)
    assert outcome.status == "failed" and outcome.summary["signal"] == "SIGKILL", outcome.summary
    rows = (outcome.run_dir / "iterations.csv").read_text().splitlines()
    assert rows[0].startswith("iteration,phase") and sum(",measure," in r for r in rows) >= 1
    assert f"iterations.csv keeps the {len(rows) - 1} iteration(s)" in outcome.summary["error"]


def test_a_tiny_disk_is_refused_before_training(tmp_path):
    """A real 4 MiB tmpfs (where this machine lets us mount one): the run folder could not fit."""
    import subprocess

    from test_store import _mount

    from tbdkit.launch import launch

    tiny = tmp_path / "tiny"
    tiny.mkdir()
    _mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(tiny))
    try:
        with pytest.raises(UserError, match=r"Only 4 MiB are free where the results go"):
            launch(SPEC, tiny / "results", lambda e: None)
    finally:
        subprocess.run(["umount", str(tiny)], check=False)


def test_a_sweep_into_a_file_fails_before_writing_and_a_damaged_state_is_named(tmp_path):
    from typer.testing import CliRunner

    from tbdkit.cli import app

    spec = sweep_spec(tmp_path)
    spec.state_dir().mkdir(parents=True)
    (spec.state_dir() / "sweep.json").write_text('{"points": [1, 2]}')
    with pytest.raises(UserError, match=r"The sweep state .*sweep.json is damaged \(not a sweep state\): move it away"):
        SweepRun(spec)
    (tmp_path / "afile").write_text("x")
    out = CliRunner().invoke(app, ["sweep", "mlp_numpy", "-f", "numpy", "--device", "cpu", "--preset", "smoke",
                                   "-b", "2", "-r", str(tmp_path / "afile")])
    assert out.exit_code == 2 and "is a file, not a folder" in out.output, out.output
    assert (tmp_path / "afile").read_text() == "x"


# The agent as `python -m tbdkit.agent` runs it, with one thing replaced: a first Ctrl-C lands just before warm-up's
# first step (on a slow framework, while its first step is traced, a deadline's SIGINT lands there too).
STOPPED_BEFORE_THE_FIRST_STEP = """
import sys
from pathlib import Path
from tbdkit.agent import run
from tbdkit.spec import run_spec as specs

real = run.warm_up

def warm_up(r):
    r.stop(2, None)  # SIGINT's handler, as the signal calls it
    real(r)

run.warm_up = warm_up
sys.exit(run.execute(specs.load(Path(sys.argv[1])), Path(sys.argv[2])))
"""


def test_a_run_stopped_before_its_first_iteration_still_has_iterations_csv_with_its_columns(tmp_path):
    """The loop started, no iteration ended: the run is interrupted, and iterations.csv holds its header and no row
    (it held an empty line, which no reader of the file could take as a table)."""
    import subprocess
    import sys

    from run_invariants import assert_run_holds

    spec_file, run_dir = tmp_path / "spec.json", tmp_path / "run"
    spec_file.write_text(SPEC.model_dump_json())
    run_dir.mkdir()
    proc = subprocess.run([sys.executable, "-c", STOPPED_BEFORE_THE_FIRST_STEP, str(spec_file), str(run_dir)],
                          capture_output=True, text=True, timeout=120)
    summary = assert_run_holds(run_dir, launched=False)
    assert summary["status"] == "interrupted" and "loop_started_utc" in summary, (proc.returncode, proc.stderr[-2000:])
    lines = (run_dir / "iterations.csv").read_text().splitlines()
    assert lines == ["iteration,phase,start_s,seconds,data_wait_s,samples,work,loss"], lines
