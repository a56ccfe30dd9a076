"""`make kick-the-tires BUDGET=...` / `tbdkit kick-the-tires --budget S --results DIR` (tbdkit/bench/kick.py): every
instrument once inside a budget. The GPU plan's steps, the deadline's arithmetic and the table without running;
the end-to-end run as an evaluator types it (from the repo root, the default relative results folder) is
tests/test_as_typed.py's walk, which goes on to its bundle."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from killed_writes import killed_mid_write
from typer.testing import CliRunner

from tbdkit.bench import kick
from tbdkit.cli.main import app
from tbdkit.core.errors import UserError
from tbdkit.core.paths import KIT_ROOT


def test_the_gpu_plan_is_ordered_by_value_and_profiles_the_resnet_run(tmp_path) -> None:
    steps = kick.plan("cuda", tmp_path, ["pytorch"])
    names = [s.name for s in steps]
    assert names == ["doctor", "calibrate", "rn50-fp32", "ncu-rn50", "ds2-fp32", "rn50-amp", "ds2-amp", "rn50-tf32",
                     "ds2-tf32", "report", "bundle"]
    calibrate = steps[1].args
    assert isinstance(calibrate, list) and calibrate[:4] == ["calibrate", "--quick", "--device", "cuda:0"]
    for step in [steps[2], *steps[4:9]]:
        args = step.args
        assert isinstance(args, list) and args[0] == "bench" and step.measures and step.window is not None
        for flag, value in (("--preset", "paper"), ("--device", "cuda"), ("--framework", "pytorch"),
                            ("--results", str(tmp_path)), ("--max-warmup-s", "{warm}"), ("--max-measure-s", "{window}")):
            assert args[args.index(flag) + 1] == value
        assert sum(step.window) <= 25
        assert args[args.index("--precision") + 1] == step.name.split("-")[1]
    ncu = steps[3].args
    assert callable(ncu)
    assert ncu({}) == "rn50-fp32 made no run with numbers to profile"
    made = kick.Outcome("rn50-fp32", "ok", 50, 90, runs=[{"run_id": "r1", "status": "disturbed"}])
    args = ncu({"rn50-fp32": made})
    assert isinstance(args, list) and args[:3] == ["reference", "--run", str(tmp_path / "r1")]
    assert args[args.index("--profile-iterations") + 1] == "1" and args[args.index("--launch-count") + 1] == "1"
    assert [s.final for s in steps].count(True) == 2 and steps[-1].args == ["bundle", str(tmp_path), "-o",
                                                                           f"{tmp_path}.tar.gz"]


def test_a_step_s_warm_up_and_window_are_sized_from_the_time_it_has() -> None:
    assert kick.size_window((15, 10), 75) == (15, 10)  # room for both beside the start
    warm, window = kick.size_window((15, 10), 35)  # 10 s of room: both shrunk in proportion
    assert (warm, window) == (6.0, 4.0) and warm + window + kick.STARTUP_S <= 35
    assert kick.size_window((15, 10), 20) == (3.6, 3.0)  # never below 3 s each


def test_the_gpu_plan_for_390_s_reaches_the_ncu_pass_and_60_s_fits_no_measuring_step(tmp_path) -> None:
    steps = kick.plan("cuda", tmp_path, ["pytorch"])
    fits = {f.step.name: f.fits for f in kick.forecast(steps, 390)}
    assert fits["calibrate"] and fits["rn50-fp32"] and fits["ncu-rn50"] and fits["ds2-fp32"]
    assert fits["report"] and fits["bundle"]
    assert "estimates" in kick.plan_text(kick.forecast(steps, 390), 390)
    assert kick.fits_nothing(steps, 390) is None
    why = kick.fits_nothing(steps, 60)
    assert why is not None and why.startswith("--budget 60 s fits no measuring step") and "--budget" in why


def test_kick_the_tires_plan_as_typed_on_a_cpu(tmp_path) -> None:
    """`tbdkit kick-the-tires --plan --device cuda --budget 390` on a machine without a GPU: the plan, nothing run;
    `--budget 60` exits non-zero before anything is installed or measured."""
    env = {**os.environ, "COLUMNS": "200", "TBDKIT_VENVS": str(tmp_path / "no-stacks")}
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "kick-the-tires", "--plan", "--device", "cuda",
                           "--budget", "390", "--results", str(tmp_path / "r")], capture_output=True, text=True,
                          env=env, cwd=KIT_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    order = [next(i for i, line in enumerate(lines) if line.startswith(name + " ")) for name in
             ("calibrate", "rn50-fp32", "ncu-rn50", "ds2-fp32", "rn50-amp")]
    assert order == sorted(order) and "skipped" not in lines[order[2]] and "estimates" in proc.stdout
    assert not (tmp_path / "r").exists() and not (tmp_path / "no-stacks").exists()
    for args in (["--plan"], []):
        proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "kick-the-tires", *args, "--device", "cuda",
                               "--budget", "60", "--results", str(tmp_path / "r")], capture_output=True, text=True,
                              env=env, cwd=KIT_ROOT, timeout=120)
        assert proc.returncode != 0 and "fits no measuring step" in " ".join((proc.stdout + proc.stderr).split())
        assert not (tmp_path / "r").exists() and not (tmp_path / "no-stacks").exists()


def test_a_budget_too_small_for_anything_skips_each_step_and_says_why(tmp_path) -> None:
    steps = kick.plan("cpu", tmp_path, ["pytorch", "mxnet"])
    outcomes = kick.run(steps, 3, tmp_path)
    assert [o.status for o in outcomes] == ["skipped"] * 5
    assert outcomes[0].note.startswith("deadline: ") and "kept for the report and the bundle" in outcomes[0].note
    assert outcomes[3].note == "no run finished with numbers to report"
    assert kick.exit_code(outcomes, steps) == 1  # nothing was measured: never "ok"
    saved = json.loads((tmp_path / kick.FOLDER / "steps.json").read_text())
    assert [s["step"] for s in saved["steps"]] == ["smoke-pytorch", "smoke-mxnet", "trace", "report", "bundle"]
    assert "smoke-mxnet" in (tmp_path / kick.FOLDER / "table.txt").read_text()


def test_the_exit_code_is_non_zero_when_no_measuring_step_ran(tmp_path) -> None:
    steps = kick.plan("cuda", tmp_path, ["pytorch"])
    ran = [kick.Outcome("doctor", "ok", 2, 20), kick.Outcome("calibrate", "skipped", 0, 90, "deadline"),
           kick.Outcome("report", "skipped", 0, 60), kick.Outcome("bundle", "ok", 3, 40)]
    assert kick.exit_code(ran, steps) == 1
    ran[1] = kick.Outcome("calibrate", "timeout", 60, 90, "stopped")  # stopped before it measured anything
    assert kick.exit_code(ran, steps) == 1
    ran[1] = kick.Outcome("rn50-fp32", "timeout", 60, 75, runs=[{"run_id": "r1", "status": "interrupted"}])
    assert kick.exit_code(ran, steps) == 1
    ran[1] = kick.Outcome("rn50-fp32", "timeout", 60, 75, runs=[{"run_id": "r1", "status": "disturbed"}])
    assert kick.exit_code(ran, steps) == 0
    ran[1] = kick.Outcome("calibrate", "ok", 40, 90)
    assert kick.exit_code(ran, steps) == 0
    ran[3] = kick.Outcome("bundle", "failed", 3, 40)
    assert kick.exit_code(ran, steps) == 1


def test_a_bench_stopped_at_its_deadline_leaves_a_finished_run_folder(tmp_path, monkeypatch) -> None:
    """A real bench (the machinery stack at a batch whose warm-up and window take minutes) stopped at the deadline
    with no grace: SIGINT, then at once SIGKILL to its launcher and to its agent (in a session of its own) before
    either finished the run folder. The kick finishes it as the launcher would have (an interrupted summary saying
    why, mllog.txt), no process of the step is left, and every invariant of a launched run holds; where the agent
    had written its summary, only mllog.txt is added."""
    import psutil
    from run_invariants import assert_run_holds

    monkeypatch.setattr(kick, "GRACE_S", 0.0)
    results = tmp_path / "r"
    args = ["bench", "--model", "mlp_numpy", "--framework", "numpy", "--preset", "smoke", "--device", "cpu",
            "--batch", "8192", "--max-warmup-s", "600", "--max-measure-s", "600", "--target-ci", "1e-6",
            "--results", str(results), "--json"]
    (tmp_path / "logs").mkdir()
    step = kick.Step("smoke-numpy", args, cap_s=60, json_stdout=True, measures=True)
    outcome = kick.run_step(step, args, 12.0, tmp_path / "logs", results)
    assert outcome.status == "timeout", outcome
    (run,) = outcome.runs
    left = []
    for p in psutil.process_iter(["cmdline"]):
        if any(run["run_id"] in part for part in p.info["cmdline"] or ()):
            left.append(p.info["cmdline"])
    assert not left, left
    assert run["status"] == "interrupted" and "kick-the-tires' deadline after 12 s" in run["error"], run
    summary = assert_run_holds(results / run["run_id"])  # summary, spec, log, mllog.txt; its index row
    assert summary["status"] == "interrupted"
    mllog = results / run["run_id"] / "mllog.txt"
    mllog.unlink()  # as when the agent wrote its summary and only the launcher was killed
    kick._finish_stopped(results, 0.0, 12.0)
    assert mllog.is_file() and assert_run_holds(results / run["run_id"]) == summary
    # killed while a write was under way (a chance a deadline's SIGKILL takes): the half file goes, the summary says so
    for name in ("summary.json", "mllog.txt"):
        (results / run["run_id"] / name).unlink()
    killed_mid_write(results / run["run_id"] / "iterations.csv")
    kick._finish_stopped(results, 0.0, 12.0)
    error = assert_run_holds(results / run["run_id"])["error"]
    assert error.endswith("it measured; its unfinished write of iterations.csv was removed"), error


@pytest.mark.parametrize("budget", ["nan", "inf", "-5", "0"])
def test_a_budget_that_is_not_a_positive_number_is_refused(budget) -> None:
    result = CliRunner().invoke(app, ["kick-the-tires", "--plan", "--device", "cuda", "--budget", budget])
    assert result.exit_code == 2 and "--budget must be a number of seconds above 0" in result.output


@pytest.mark.parametrize("case", ["file", "under-file", "read-only", "devnull"])
def test_a_results_folder_that_cannot_be_written_is_one_sentence(tmp_path, monkeypatch, case) -> None:
    (tmp_path / "f").write_text("x")
    folder = {"file": tmp_path / "f", "under-file": tmp_path / "f" / "r", "read-only": tmp_path / "ro",
              "devnull": Path("/dev/null")}[case]  # fmt: skip
    if case == "read-only":  # read-only storage (root writes into a folder of mode 0500, so it is simulated)
        def refuse(*args, **kwargs):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))

        monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(UserError, match="results") as err:
        kick.check_results(folder)
    if case == "read-only":
        assert "it is on read-only storage" in str(err.value)


def test_a_full_disk_under_the_results_folder_is_one_sentence(tmp_path) -> None:
    code = ("import sys; from pathlib import Path; from tbdkit.bench import kick; from tbdkit.core.errors import "
            "UserError\ntry:\n    kick.run(kick.plan('cpu', Path(sys.argv[1]), ['pytorch']), 3, Path(sys.argv[1]))\n"
            "except UserError as e:\n    print(e); sys.exit(2)\n")

    def limit() -> None:  # a write past 200 bytes fails with EFBIG, as a full disk fails with ENOSPC
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r")], capture_output=True, text=True,
                          timeout=120, preexec_fn=limit, cwd=KIT_ROOT)
    assert proc.returncode == 2 and "is full" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr


def test_the_makefile_target_passes_budget_and_keeps_its_results_folder() -> None:
    out = subprocess.run(["make", "-n", "-o", ".venv/.tbdkit-installed", "kick-the-tires", "BUDGET=200",
                          "KICK_RESULTS=/tmp/kick the; tires"], cwd=KIT_ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert "kick-the-tires --results '/tmp/kick the; tires' --budget '200'" in out
    default = subprocess.run(["make", "-n", "-o", ".venv/.tbdkit-installed", "kick-the-tires"], cwd=KIT_ROOT,
                             capture_output=True, text=True, check=True).stdout
    assert "kick-the-tires --results 'results-kick-the-tires'" in default and "--budget" not in default


def test_on_a_cpu_it_uses_the_installed_stacks_and_installs_only_from_a_lock_for_this_python(monkeypatch) -> None:
    """No stack installs unasked; --setup installs only from a lock made for this interpreter, saying so otherwise."""
    from tbdkit.cli import kick as cli_kick
    from tbdkit.env import locks, stacks
    from tbdkit.spec import catalog

    model = catalog.get("deepspeech2")
    monkeypatch.setattr(stacks, "state", lambda fw: "installed" if fw == "mxnet" else "not installed")
    assert cli_kick.stacks_for(model, [], "cpu", setup=False, plan_only=False) == ["mxnet"]
    monkeypatch.setattr(stacks, "state", lambda fw: "not installed")
    with pytest.raises(UserError, match="No framework stack is installed or adopted here"):
        cli_kick.stacks_for(model, [], "cpu", setup=False, plan_only=False)
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    other = "3.9" if here != "3.9" else "3.8"
    monkeypatch.setattr(stacks, "lock_of", lambda s: locks.LockEnv(s.name, (), here if s.name == "pytorch" else other,
                                                                   "test"))
    assert cli_kick.stacks_for(model, [], "cpu", setup=True, plan_only=False) == ["pytorch"]
    monkeypatch.setattr(stacks, "lock_of", lambda s: locks.LockEnv(s.name, (), other, "test"))
    with pytest.raises(UserError, match="adopt an interpreter that holds the framework"):
        cli_kick.stacks_for(model, [], "cuda", setup=True, plan_only=False)
