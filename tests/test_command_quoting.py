"""Commands the kit shows or composes are shell-quoted: `data prepare`'s suggestion, the
Makefile's recipes and log.txt's first line each give a path with a space, `;`, quotes or `$(..)`
to the CLI as one argument, and run nothing else."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tbdkit.core.paths import KIT_ROOT
from tbdkit.launch import native
from tbdkit.spec import run_spec as specs

ODD = ["a b;touch PWNED", "it's $(touch PWNED) `id` \"q\"", "x&&y|z>w", "$(shell touch PWNED)", "line\none 'two'"]


def _argv_stub(tmp_path: Path) -> Path:
    stub = tmp_path / "argv.py"
    stub.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    stub.chmod(0o755)
    return stub


def _make(tmp_path: Path, target: str, **variables: str) -> list[str]:
    """The argv the Makefile's `target` gives the CLI (the CLI replaced by a stub printing its argv)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make here")
    shutil.copy(KIT_ROOT / "Makefile", tmp_path / "Makefile")
    args = [f"{k}={v}" for k, v in variables.items()]
    proc = subprocess.run([make, "-s", "-o", ".venv/.tbdkit-installed", target, f"TBDKIT={_argv_stub(tmp_path)}",
                           *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("odd", ODD)
def test_makefile_passes_each_path_as_one_argument(tmp_path, odd):
    argv = _make(tmp_path, "bench", DATA=f"/data/{odd}", RESULTS=f"res {odd}", FRAMEWORK="pytorch")
    assert argv[argv.index("--data") + 1] == f"/data/{odd}"
    assert argv[argv.index("--results") + 1] == f"res {odd}"
    assert argv[argv.index("--framework") + 1] == "pytorch"
    argv = _make(tmp_path, "sweep", DATA=odd, BATCH="8,16")
    assert argv[argv.index("--data") + 1] == odd and argv[argv.index("--batch") + 1] == "8,16"
    assert _make(tmp_path, "report", RESULTS=odd, REPORT=odd) == ["report", odd, "--out", odd]
    assert _make(tmp_path, "bundle", RESULTS=odd)[1] == odd
    for target in ("bench", "sweep", "report", "bundle"):  # your own models' folders, one argument however named
        argv = _make(tmp_path, target, WORKLOADS=f"/mine/{odd}:/also")
        assert argv[argv.index("--workloads") + 1] == f"/mine/{odd}:/also"
    assert not list(tmp_path.rglob("PWNED"))


def test_data_prepare_suggests_a_command_that_pastes_as_it_is(tmp_path):
    folder = tmp_path / "image net; touch PWNED 'x'"
    for wnid in ("n01440764", "n01443537"):
        (folder / wnid).mkdir(parents=True)
        Image.new("RGB", (40, 30), (90, 20, 200)).save(folder / wnid / f"{wnid}_0.JPEG")
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "data", "prepare", "resnet50", "--from", str(folder)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("run it with")]
    command = re.fullmatch(r"run it with `(.*)`", line)
    assert command is not None, line
    assert shlex.split(command[1]) == ["make", "bench", "MODEL=resnet50", f"DATA={folder}"]


def test_log_txt_records_the_command_as_a_shell_reads_it(tmp_path, monkeypatch):
    run_dir = tmp_path / "run; touch PWNED"
    run_dir.mkdir()
    cmd = [sys.executable, "-c", "import sys", str(run_dir / "spec.json"), "it's $(id)"]
    monkeypatch.setattr(native, "command", lambda spec, run_dir: cmd)
    spec = specs.build(model="resnet50", batch_size=2, device="cpu")
    assert native.run(spec, run_dir, lambda event: None) == 0
    first = (run_dir / "log.txt").read_text().splitlines()[0]
    assert first.startswith("$ ") and shlex.split(first[2:]) == cmd


# Every variable a user sets on make's command line (or in the environment); the others are the Makefile's own.
USER_VARIABLES = ("MODEL FRAMEWORK BATCH PRESET PRECISION GRAPH LAUNCHER NODES GPUS_PER_NODE LINK_RATE RESULTS DATA WORKLOADS PYTHON "
                  "REPEAT REPORT MAX_WARMUP_S CPUS PIN ONE_PROCESS RETRY_DISTURBED INCLUDE_DISTURBED KICK_RESULTS DEVICE QUICK ADOPT WHEELS BUDGET SETUP "
                  "TEST_WORKERS TEST_WORKERS_host TEST_WORKERS_pytorch TEST_WORKERS_tensorflow TEST_WORKERS_mxnet").split()
MAKEFILE_OWN = {"VENV", "TBDKIT", "KIT_STAMP", "KIT_LOCK", "FRAMEWORK_TESTS", "MAKE", "USER_VARIABLES", "ONE_THREAD", "TBDKIT_NL",
                "ONE_CORE", "WORKLOADS_OPT", "WARMUP_OPT"}


def test_every_variable_the_makefile_reads_is_its_own_or_a_user_one():
    text = (KIT_ROOT / "Makefile").read_text()
    read = set(re.findall(r"\$\((?:value )?([A-Z][A-Za-z_]*)\)", text))
    assert read <= set(USER_VARIABLES) | MAKEFILE_OWN, read - set(USER_VARIABLES) - MAKEFILE_OWN
    # a user variable is only ever read through $(value ...): never expanded as make text
    assert not read & set(USER_VARIABLES) - set(re.findall(r"\$\(value ([A-Z][A-Za-z_]*)\)", text))
    assert not re.search(r"\$\((?:" + "|".join(USER_VARIABLES) + r")\)", text)


def test_every_default_reaches_its_command_and_the_command_line_overrides_it(tmp_path):
    """`unexport` defines a variable, so a `?=` default written below it never applied (the host suite ran
    on one worker); each default must reach the command it is for."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make here")
    shutil.copy(KIT_ROOT / "Makefile", tmp_path / "Makefile")
    defaults = dict(re.findall(r"^([A-Z][A-Za-z_]*) \?= ?(.*)$", (KIT_ROOT / "Makefile").read_text(), flags=re.M))
    assert {"TEST_WORKERS", "TEST_WORKERS_host", "MODEL", "PRECISION"} <= set(defaults)
    probe = tmp_path / "probe.mk"
    probe.write_text("include Makefile\nprobe:\n\t@echo " + " ".join(f"{v}=[$(value {v})]" for v in defaults) + "\n")
    out = subprocess.run([make, "-s", "-f", probe.name, "probe"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60).stdout
    assert out.split() == [f"{v}=[{d}]" for v, d in defaults.items()]

    def parallel_pass(target: str, *overrides: str) -> str:
        proc = subprocess.run([make, "-n", "-o", ".venv/.tbdkit-installed", target, *overrides], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        (line,) = [ln for ln in proc.stdout.splitlines() if '-m "not serial and not compiled_matrix"' in ln]
        return line

    # the host suite's workers each run on one core (tests/conftest.py)
    assert parallel_pass("test-host").startswith("rc=0; TBDKIT_TEST_ONE_CORE_PER_WORKER=1 ")
    assert "-n '4' --dist loadfile" in parallel_pass("test-host")
    # a stack's workers take one framework thread each; one worker keeps the framework's own threads
    for stack in ("pytorch", "tensorflow", "mxnet"):
        assert parallel_pass(f"test-{stack}").startswith("rc=0; OMP_NUM_THREADS=1 TF_NUM_INTRAOP_THREADS=1 ")
        assert "-n '2' --dist loadfile" in parallel_pass(f"test-{stack}")
    one = parallel_pass("test-pytorch", "TEST_WORKERS_pytorch=1")
    assert "--dist" not in one and "OMP_NUM_THREADS" not in one
    assert "-n '2' --dist loadfile" in parallel_pass("test-host", "TEST_WORKERS_host=2")
    assert "TBDKIT_TEST_ONE_CORE_PER_WORKER" not in parallel_pass("test-host", "TEST_WORKERS_host=1")


def test_no_user_variable_makes_make_run_code_in_any_target(tmp_path):
    """`make -n sweep 'MODEL=$(shell touch x)'` (what a forged spec.json in ARTIFACT.md's regenerate
    line would type) creates nothing, whatever the variable and the target."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make here")
    shutil.copy(KIT_ROOT / "Makefile", tmp_path / "Makefile")
    targets = re.search(r"^\.PHONY: (.*)$", (KIT_ROOT / "Makefile").read_text(), flags=re.M)[1].split()
    assert {"bench", "sweep", "report", "bundle", "kick-the-tires", "test", "reference"} <= set(targets)
    payloads = [f"{v}=$(shell touch {tmp_path}/made-by-{v})`touch {tmp_path}/shell-{v}`$$(touch {tmp_path}/sub-{v})"
                for v in USER_VARIABLES]
    for target in targets:
        proc = subprocess.run([make, "-n", "-o", ".venv/.tbdkit-installed", target, *payloads], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        made = sorted(p.name for p in tmp_path.iterdir() if p.name != "Makefile")
        assert made == [], (target, made, proc.stderr[-500:])


def test_sweep_and_bench_take_every_value_as_one_argument(tmp_path):
    odd = "fp32$(shell touch PWNED)`touch PWNED`"
    argv = _make(tmp_path, "sweep", MODEL=odd, FRAMEWORK=odd, BATCH=odd, PRESET=odd, PRECISION=odd, REPEAT=odd,
                 LAUNCHER=odd, CPUS=odd, RETRY_DISTURBED=odd, MAX_WARMUP_S=odd)
    assert argv[1] == odd
    for option in ("--frameworks", "--batch", "--preset", "--precision", "--repeat", "--launcher", "--cpus",
                   "--retry-disturbed", "--max-warmup-s"):
        assert argv[argv.index(option) + 1] == odd, option
    argv = _make(tmp_path, "bench", MODEL=odd, NODES=odd, GPUS_PER_NODE=odd, LINK_RATE=odd, MAX_WARMUP_S=odd)
    options = ("--model", "--nodes", "--gpus-per-node", "--link-rate", "--max-warmup-s")
    assert [argv[argv.index(o) + 1] for o in options] == [odd] * 5
    # unset, the preset's own (stretching) cap applies: no option at all
    assert "--max-warmup-s" not in _make(tmp_path, "bench") + _make(tmp_path, "sweep")
    assert not list(tmp_path.rglob("PWNED"))


def test_a_spec_that_would_run_code_is_not_bundled_nor_in_artifact_md(tmp_path):
    """ARTIFACT.md's regenerate lines come from specs the kit validated: a spec.json whose precision is
    `fp32$(shell touch x)` makes its run broken (listed, not packed), and no line carries it."""
    from tbdkit.artifact import bundle as artifact

    results = tmp_path / "results"
    for run_id, precision in (("good", "fp32"), ("forged", f"fp32$(shell touch {tmp_path}/PWNED)")):
        run = results / run_id
        run.mkdir(parents=True)
        (run / "spec.json").write_text(json.dumps({"model": "resnet50", "framework": "pytorch", "batch_size": 2,
                                                   "precision": precision}))
        (run / "summary.json").write_text(json.dumps({"run_id": run_id, "status": "ok", "model": "resnet50",
                                                      "framework": "pytorch", "batch_size": 2,
                                                      "precision": "fp32"}))
    manifest = artifact.bundle(results, tmp_path / "a.tgz")
    assert manifest["runs"] == ["good"]
    (broken,) = manifest["broken_runs"]
    assert broken["run"] == "forged" and "spec.json is not a valid run spec (precision" in broken["reason"]
    _, files = artifact.read(tmp_path / "a.tgz")
    guide = files["ARTIFACT.md"].decode()
    assert "$(shell" not in guide and "make sweep MODEL=resnet50 FRAMEWORK=pytorch BATCH=2" in guide
    assert not any(name.startswith("results/forged/") for name in files)
