"""`make kick-the-tires BUDGET=...` / `tbdkit kick-the-tires --budget S --results DIR` (tbdkit/bench/kick.py): every
instrument once inside a budget. The GPU plan's steps, the deadline's arithmetic and the table without running;
the end-to-end run as an evaluator types it (from the repo root, the default relative results folder) is
tests/test_as_typed.py's walk, which goes on to its bundle."""

from __future__ import annotations

import json
import subprocess

from tbdkit.bench import kick
from tbdkit.core.paths import KIT_ROOT


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
