"""`tbdkit sweep`, `bundle` and `reproduce` for real on this machine's CPU: a small sweep, a
sweep killed mid-grid and resumed, the max-batch search under a memory limit, and a bundle's
round trip through reproduce. The sweeps train the machinery check (`mlp_numpy` on the NumPy stack, the kit's own
environment: docs/machinery-check.md): the grid, its state, resume, the max-batch search and the bundle are the
kit's, whatever trains."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tbdkit.artifact import bundle as artifact
from tbdkit.results.index import Index
from model_checks import cli, ctrl_c_at, tbdkit, tbdkit_command
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

FAST = ["--framework", "numpy", "--preset", "smoke", "--device", "cpu", "--max-warmup-s", "1", "--max-measure-s", "2"]
SMALL_SWEEP = ["sweep", "mlp_numpy", *FAST, "--batch", "1,2", "--cv-limit", "0.5"]


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    """SMALL_SWEEP: (its results folder, the finished `tbdkit sweep` process), run once for this module."""
    results = tmp_path_factory.mktemp("sweep") / "results"
    return results, tbdkit(*SMALL_SWEEP, "--results", str(results))


def state_of(results: Path) -> dict:
    (path,) = results.glob("sweeps/*/sweep.json")
    return json.loads(path.read_text())


def fingerprint(run_dir: Path) -> dict[str, tuple[int, str]]:
    return {p.name: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(run_dir.iterdir()) if p.is_file()}


def test_small_sweep_runs_the_grid(small_sweep):
    results, proc = small_sweep
    assert proc.returncode == 0, proc.stdout + proc.stderr
    state = state_of(results)
    assert list(state["points"]) == ["numpy/fp32/b1/r0", "numpy/fp32/b2/r0"]
    runs = {r["run_id"]: r for r in Index(results).runs()}
    for key, point in state["points"].items():
        assert point["status"] in MEASURED and runs[point["run_id"]]["status"] in MEASURED
        assert runs[point["run_id"]]["batch_size"] == point["batch_size"] and point["throughput"] > 0
        assert point["window_cv"] is not None and point["window_cv"] >= 0
    rows = Index(results).sweep_points(state["sweep_id"])  # the index holds each point as the state ended it
    assert [(r["batch_size"], r["status"]) for r in rows] == [(p["batch_size"], p["status"]) for p in state["points"].values()]
    assert [r["batch_size"] for r in rows] == [1, 2] and {r["status"] for r in rows} <= set(MEASURED)
    assert "done 2 · failed 0 · pending 0" in proc.stdout and "ETA" in proc.stdout
    assert "batch 1" in proc.stdout and "sweep.json" in proc.stdout
    again = tbdkit(*SMALL_SWEEP, "--results", str(results))
    assert again.returncode == 0 and state_of(results)["points"] == state["points"]  # nothing re-ran
    assert len([d for d in results.iterdir() if (d / "spec.json").exists()]) == 2


def test_bundle_and_reproduce_round_trip(small_sweep, tmp_path):
    results, proc = small_sweep
    assert proc.returncode == 0
    bundle = tmp_path / "artifact.tar.gz"
    made = tbdkit("bundle", str(results), "-o", str(bundle))
    assert made.returncode == 0, made.stdout + made.stderr
    manifest, files = artifact.read(bundle)
    runs = sorted(p["run_id"] for p in state_of(results)["points"].values())
    assert manifest["runs"] == runs and len(manifest["sweeps"]) == 1
    for run in runs:
        for name in ("spec.json", "summary.json", "iterations.csv"):  # nothing of this machine's in these
            assert files[f"results/{run}/{name}"] == (results / run / name).read_bytes()
        log = files[f"results/{run}/log.txt"].decode()  # the command's paths: relative to the results folder
        assert f"--run-dir <results>/{run}" in log and str(results) not in log
        assert json.loads(files[f"results/{run}/env.json"])["host"]["hostname"] == "<host>"
    assert "images.lock" in files and manifest["kit_version"] == "0.1.0"
    assert all(len(f["sha256"]) == 64 for f in manifest["files"].values())
    new_results = tmp_path / "again"
    rep = tbdkit("reproduce", str(bundle), "--results", str(new_results), "--yes", env={"COLUMNS": "300"})
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "the plan" in rep.stdout and "warm-up <= 1 s, window <= 2 s" in rep.stdout
    (report_file,) = new_results.glob("reproduce-*.json")
    report = json.loads(report_file.read_text())
    assert [p["recorded_run"] for p in report["points"]] == runs
    for point in report["points"]:
        new_run = json.loads((new_results / point["new_run"] / "summary.json").read_text())
        thr = point["metrics"]["throughput"]
        assert thr["new"] == new_run["metrics"]["throughput"]["value"]
        # the same quantity in the same unit (a mix-up reads 1e-3 or 1e3); not a speed check: a shared 2-core
        # machine can run one run many times slower than the other
        assert thr["ratio"] == pytest.approx(thr["new"] / thr["recorded"]) and 0.01 < thr["ratio"] < 100
        assert json.loads((new_results / point["new_run"] / "spec.json").read_text()) == \
            json.loads(files[f"results/{point['recorded_run']}/spec.json"])
    assert "new / recorded" in rep.stdout
    (tmp_path / "bad.tar.gz").write_bytes(bundle.read_bytes()[:-300])
    bad = tbdkit("reproduce", str(tmp_path / "bad.tar.gz"), "--results", str(tmp_path / "x"))
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr


def test_killed_sweep_resumes(tmp_path):
    results = tmp_path / "results"
    # a window long enough (2 s, no early stop) for the poll below to find the second point measuring
    args = ["sweep", "mlp_numpy", *FAST, "--target-ci", "0.00001", "--batch", "1,2,3", "--results", str(results)]
    proc = subprocess.Popen(tbdkit_command(*args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    victim = None
    while time.time() < deadline and victim is None:
        time.sleep(0.3)
        try:
            points = state_of(results)["points"]
        except (ValueError, OSError):
            continue
        if points["numpy/fp32/b2/r0"]["status"] == "running":
            for log in results.glob("*-b2-*/log.txt"):
                if '"measuring"' in log.read_text():
                    victim = log.parent
    if victim is None:
        proc.kill()
        pytest.fail("the sweep never reached its second point's sample window")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = state_of(results)
    done = before["points"]["numpy/fp32/b1/r0"]
    assert done["status"] in MEASURED and before["points"]["numpy/fp32/b2/r0"]["status"] == "running"
    kept = fingerprint(results / done["run_id"])
    # The killed sweep's agent stops too (it is told when its launcher dies) and says so.
    for _ in range(60):
        if (victim / "summary.json").exists():
            break
        time.sleep(0.5)
    assert json.loads((victim / "summary.json").read_text())["status"] == "interrupted"
    rerun = subprocess.run(tbdkit_command(*args), capture_output=True, text=True, timeout=400)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "resuming sweep" in rerun.stdout and "1 point(s) done are kept" in rerun.stdout
    after = state_of(results)["points"]
    assert after["numpy/fp32/b1/r0"] == done  # skipped, same run
    assert fingerprint(results / done["run_id"]) == kept  # not touched
    retried = after["numpy/fp32/b2/r0"]
    assert retried["status"] in MEASURED and retried["run_id"] != victim.name
    assert after["numpy/fp32/b3/r0"]["status"] in MEASURED
    # the finished run stays indexed as it ended (ok, or disturbed beside a neighbour test)
    assert {r["run_id"]: r["status"] for r in Index(results).runs()}[done["run_id"]] == done["status"]


def test_ctrl_c_after_a_points_window_keeps_its_run_stops_the_sweep_with_130_and_a_rerun_resumes(tmp_path):
    """A Ctrl-C that reaches the first point's run after its sample window (as the display shows its analysis
    phase): the run keeps what it measured and the point is done, but the user asked to stop: the next point never
    starts, the state says where the sweep stopped, the command exits 130 saying how to resume, and the same command
    then resumes the sweep to its end without touching the kept run. In this process (CliRunner) so the Ctrl-C
    lands in that phase every time; a Ctrl-C inside the window is tests/test_sweep_logic.py's."""
    import tbdkit.cli  # noqa: F401  (it installs its own display; ctrl_c_at's replaces it while it lasts)

    results = tmp_path / "results"
    args = ["sweep", "mlp_numpy", "--framework", "numpy", "--preset", "smoke", "--device", "cpu",
            "--max-warmup-s", "0.5", "--max-measure-s", "1", "--batch", "1,2", "--cv-limit", "0.5",
            "--results", str(results)]
    with ctrl_c_at("analysis"):
        stopped = cli(*args)
    said = stopped.stdout + stopped.stderr
    assert stopped.returncode == 130, said
    assert "Sweep interrupted (Ctrl-C) at numpy/fp32/b1/r0, whose run kept what it measured" in said
    assert "run the same command again to resume it (1 of 2 point(s) done are kept)" in said
    state = state_of(results)
    first, second = state["points"]["numpy/fp32/b1/r0"], state["points"]["numpy/fp32/b2/r0"]
    assert state["interrupted"]["at"] == "numpy/fp32/b1/r0" and state["interrupted"]["kept"] is True
    assert state["interrupted"]["run_id"] == first["run_id"] and "Ctrl-C" in first["attempts"][-1]["interrupted"]
    summary = json.loads((results / first["run_id"] / "summary.json").read_text())
    assert first["status"] == summary["status"] and summary["status"] in MEASURED
    assert summary["window"]["stop_reason"] != "interrupted" and first["throughput"] > 0
    assert second["status"] == "pending" and second["attempts"] == []  # never started
    assert [d.name for d in results.iterdir() if (d / "spec.json").exists()] == [first["run_id"]]
    assert [r["run_id"] for r in Index(results).runs()] == [first["run_id"]]
    before = fingerprint(results / first["run_id"])
    again = cli(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "the sweep was stopped here (Ctrl-C); its run" in again.stdout + again.stderr
    after = state_of(results)
    assert after["interrupted"] is None and {p["status"] for p in after["points"].values()} <= set(MEASURED)
    resumed = after["points"]["numpy/fp32/b1/r0"]
    assert (resumed["run_id"], resumed["attempts"]) == (first["run_id"], first["attempts"])  # kept, not re-run
    assert fingerprint(results / first["run_id"]) == before  # only read
    assert len(after["points"]["numpy/fp32/b2/r0"]["attempts"]) == 1


def test_max_batch_under_a_memory_limit(tmp_path):
    """Under a 384 MiB limit on the agent's growth, the machinery check's wide preset (`--preset paper`: 64 MiB a
    sample, 98 MiB besides; docs/machinery-check.md) fits batch 4 with 30 MiB to spare and batch 5 overruns by 34
    MiB; the search must land on a batch that fits next to one that does not."""
    results = tmp_path / "results"
    wide = ["--framework", "numpy", "--preset", "paper", "--device", "cpu", "--max-warmup-s", "1", "--max-measure-s", "2"]
    proc = tbdkit("sweep", "mlp_numpy", *wide, "--batch", "2,max", "--memory-limit-mb", "384",
                  "--results", str(results))
    state = state_of(results)
    search = state["max_batch"]["numpy/fp32"]
    assert search["status"] == "found", (search, proc.stdout + proc.stderr)
    best = search["batch_size"]
    probes = search["probes"]
    assert probes[str(best)]["status"] in MEASURED and probes[str(best + 1)]["status"] == "oom"
    assert 2 <= best < 64
    ooms = [p for p in probes.values() if p["status"] == "oom"]
    assert ooms and all("out of memory" in p["error"] for p in ooms)
    point = state["points"]["numpy/fp32/bmax/r0"]
    assert point["batch_size"] == best and point["status"] in MEASURED, proc.stdout + proc.stderr
    assert proc.returncode == 0
    # Probes stay out of the results index: it holds the two measured points, and the measured runs
    # at 'max' that ran out of memory after their probe fit (under load, a longer run can grow past
    # the limit; the search then went on below them), each one of the point's recorded attempts.
    indexed = Index(results).runs()
    assert sorted(r["batch_size"] for r in indexed if r["status"] in MEASURED) == sorted([2, best])
    attempts = {a["run_id"] for e in state["points"].values() for a in e["attempts"]}
    assert {r["run_id"] for r in indexed} <= attempts
    assert all(r["status"] == "oom" and r["batch_size"] > best for r in indexed if r["status"] not in MEASURED)
    assert not {p["run_id"] for p in probes.values() if not p.get("superseded")} & {r["run_id"] for r in indexed}
    for probe in probes.values():
        summary = results / "sweeps" / state["sweep_id"] / "probes" / probe["run_id"] / "summary.json"
        assert summary.exists() or probe.get("superseded")
