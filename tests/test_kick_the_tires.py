"""`make kick-the-tires BUDGET=...` / `tbdkit kick-the-tires --budget S --results DIR` (tbdkit/bench/kick.py): every
instrument once inside a budget. End to end on this CPU as an evaluator types it, from the repo root with the
default relative results folder; the GPU plan's steps, the deadline's arithmetic and the table without running."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tbdkit.bench import kick
from tbdkit.core.paths import KIT_ROOT

BUDGET = 120  # on CI's 2 cores: PyTorch's smoke run fits, TensorFlow's is cut by the deadline or skipped
DEFAULT = KIT_ROOT / "results-kick-the-tires"
MADE = (DEFAULT, KIT_ROOT / "results-kick-the-tires-report", KIT_ROOT / "results-kick-the-tires.tar.gz")


def _remove(paths: tuple[Path, ...]) -> None:
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)


def test_make_kick_the_tires_stops_inside_its_budget_with_partial_results_and_a_table() -> None:
    if any(p.exists() for p in MADE):
        pytest.skip(f"{DEFAULT} (or its report or bundle) is already here; this test does not overwrite it")
    # `make kick-the-tires BUDGET=...` as typed; where the kit's environment is older than pyproject.toml (a
    # worktree beside a shared .venv) make would reinstall it first: -o keeps it as it is
    stale = subprocess.run(["make", "-q", ".venv/.tbdkit-installed"], cwd=KIT_ROOT).returncode != 0
    cmd = ["make", *(["-o", ".venv/.tbdkit-installed"] if stale else []), "kick-the-tires", f"BUDGET={BUDGET}"]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=KIT_ROOT, capture_output=True, text=True, timeout=BUDGET + 300)
        wall = time.monotonic() - start
        out = " ".join(proc.stdout.split())
        doc = json.loads((DEFAULT / kick.FOLDER / "steps.json").read_text())
        table = (DEFAULT / kick.FOLDER / "table.txt").read_text()
        runs = [p for p in DEFAULT.iterdir() if (p / "summary.json").is_file()]
        bundled = MADE[2].is_file()
    finally:
        _remove(MADE)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = {s["step"]: s for s in doc["steps"]}
    assert list(steps) == ["smoke-pytorch", "smoke-tensorflow", "smoke-mxnet", "trace", "report", "bundle"]
    # the budget held: the steps' clock, and the whole command with its start and the stacks' check around it
    assert doc["elapsed_s"] <= BUDGET and wall <= BUDGET + 60, (doc["elapsed_s"], wall)
    assert all(s["status"] in ("ok", "failed", "timeout", "skipped") for s in steps.values())
    assert all(s["seconds"] <= s["cap_s"] + 1 for s in steps.values())
    # partial results: at least the first stack's run folder, kept whatever the deadline did after it
    assert runs and steps["smoke-pytorch"]["runs"], steps["smoke-pytorch"]
    # the report and the bundle ran in the reserve kept for them (the report only if a run has numbers)
    assert steps["bundle"]["status"] == "ok" and bundled
    if any(r["status"] in ("ok", "disturbed") for s in steps.values() for r in s["runs"]):
        assert steps["report"]["status"] == "ok", steps["report"]
    # the final table, printed and kept: every step, and why each that did not run did not
    assert "kick-the-tires — results-kick-the-tires" in out
    for name, s in steps.items():
        assert name in out and name in table
        if s["status"] == "skipped":
            assert s["note"].startswith("deadline:") or "no run finished" in s["note"]
    assert proc.returncode == kick.exit_code([kick.Outcome(**s) for s in doc["steps"]])


def test_the_gpu_plan_measures_every_math_mode_and_profiles_the_resnet_run(tmp_path) -> None:
    steps = kick.plan("cuda", tmp_path, ["pytorch"])
    names = [s.name for s in steps]
    assert names == ["doctor", "calibrate", "rn50-fp32", "ds2-fp32", "ncu-rn50", "rn50-amp", "ds2-amp", "rn50-tf32",
                     "ds2-tf32", "report", "bundle"]
    calibrate = steps[1].args
    assert isinstance(calibrate, list) and calibrate[:4] == ["calibrate", "--quick", "--device", "cuda:0"]
    for step in steps[2:4] + steps[5:9]:
        args = step.args
        assert isinstance(args, list) and args[0] == "bench"
        for flag, value in (("--preset", "paper"), ("--device", "cuda"), ("--framework", "pytorch"),
                            ("--results", str(tmp_path))):
            assert args[args.index(flag) + 1] == value
        assert float(args[args.index("--max-warmup-s") + 1]) + float(args[args.index("--max-measure-s") + 1]) <= 25
        assert args[args.index("--precision") + 1] == step.name.split("-")[1]
    ncu = steps[4].args
    assert callable(ncu)
    assert ncu({}) == "rn50-fp32 made no run with numbers to profile"
    made = kick.Outcome("rn50-fp32", "ok", 50, 90, runs=[{"run_id": "r1", "status": "disturbed"}])
    args = ncu({"rn50-fp32": made})
    assert isinstance(args, list) and args[:3] == ["reference", "--run", str(tmp_path / "r1")]
    assert args[args.index("--profile-iterations") + 1] == "1" and args[args.index("--launch-count") + 1] == "1"
    assert [s.final for s in steps].count(True) == 2 and steps[-1].args == ["bundle", str(tmp_path), "-o",
                                                                           f"{tmp_path}.tar.gz"]


def test_a_budget_too_small_for_anything_skips_each_step_and_says_why(tmp_path) -> None:
    outcomes = kick.run(kick.plan("cpu", tmp_path, ["pytorch", "mxnet"]), 3, tmp_path)
    assert [o.status for o in outcomes] == ["skipped"] * 5
    assert outcomes[0].note.startswith("deadline: ") and "kept for the report and the bundle" in outcomes[0].note
    assert outcomes[3].note == "no run finished with numbers to report"
    assert kick.exit_code(outcomes) == 0
    saved = json.loads((tmp_path / kick.FOLDER / "steps.json").read_text())
    assert [s["step"] for s in saved["steps"]] == ["smoke-pytorch", "smoke-mxnet", "trace", "report", "bundle"]
    assert "smoke-mxnet" in (tmp_path / kick.FOLDER / "table.txt").read_text()


def test_the_makefile_target_passes_budget_and_keeps_its_results_folder() -> None:
    out = subprocess.run(["make", "-n", "-o", ".venv/.tbdkit-installed", "kick-the-tires", "BUDGET=200",
                          "KICK_RESULTS=/tmp/kick the; tires"], cwd=KIT_ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert "kick-the-tires --results '/tmp/kick the; tires' --budget '200'" in out
    default = subprocess.run(["make", "-n", "-o", ".venv/.tbdkit-installed", "kick-the-tires"], cwd=KIT_ROOT,
                             capture_output=True, text=True, check=True).stdout
    assert "kick-the-tires --results 'results-kick-the-tires'" in default and "--budget" not in default
