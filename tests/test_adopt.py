"""`tbdkit setup STACK --adopt PYTHON --wheels DIR`: a stack over an interpreter that already holds its framework,
as on a rented GPU machine or in an NGC container (tbdkit/env/adopt.py).

The interpreters are real ones, made by .ci/adopt-pythons in TBDKIT_ADOPT_PYTHONS (CI makes them once and keeps
them): PyTorch 2.13.0 on Python 3.11, TensorFlow 2.21.0 on Python 3.12, MXNet 1.9.1 on Python 3.10, each with
nothing of the kit's, and a folder of the kit's dependencies as wheels beside each. All three are adopted into
one TBDKIT_VENVS, offline, then Deep Speech 2 is trained through them with `--setup`, which must not reinstall.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from model_checks import tbdkit
from run_invariants import assert_run_holds

from tbdkit.core.errors import UserError
from tbdkit.env import adopt, doctor, locks, stacks

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = os.environ.get("TBDKIT_ADOPT_PYTHONS")
# stack -> (its interpreter's Python, the framework version it holds)
HELD = {"pytorch": ("3.11", "2.13.0+cpu"), "tensorflow": ("3.12", "2.21.0"), "mxnet": ("3.10", "1.9.1")}


def interpreters() -> Path:
    folder = Path(PYTHONS) if PYTHONS else None
    if folder is None or not all((folder / s / ".ready").is_file() for s in HELD):
        why = f"no adopted interpreters in TBDKIT_ADOPT_PYTHONS={PYTHONS!r}: run `.ci/adopt-pythons DIR` and set it"
        if os.environ.get("CI"):
            pytest.fail(why + " (.ci/run does both)")
        pytest.skip(why)
    return folder


def without_pythonpath() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return env


@pytest.fixture(scope="module")
def adopted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict]]:
    """The three stacks adopted into one TBDKIT_VENVS with `tbdkit setup` as typed; their install records."""
    folder = interpreters()
    venvs = tmp_path_factory.mktemp("adopted") / "venvs"
    records = {}
    for stack in HELD:
        python, wheels = str(folder / stack / "bin" / "python"), str(folder / f"wheels-{stack}")
        if stack == "mxnet":  # the bare Python 3.10 adopts itself with the standard library alone (no typer,
            # pydantic or tomli in it), as on a machine without a network: python -m tbdkit.env.adopt
            proc = subprocess.run([python, "-m", "tbdkit.env.adopt", stack, "--wheels", wheels], capture_output=True,
                                  text=True, timeout=900, cwd=ROOT, env={**without_pythonpath(),
                                                                         "TBDKIT_VENVS": str(venvs)})
        else:
            proc = tbdkit("setup", stack, "--adopt", python, "--wheels", wheels, env={"TBDKIT_VENVS": str(venvs)})
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"stack: adopted {HELD[stack][1]}" in " ".join(proc.stdout.split()), proc.stdout
        records[stack] = json.loads((venvs / stack / stacks.MARKER).read_text())
    return venvs, records


def test_each_record_says_adopted_which_interpreter_and_the_framework_build(adopted) -> None:
    venvs, records = adopted
    folder = interpreters()
    for stack, (python, version) in HELD.items():
        rec = records[stack]
        assert rec["adopted"]["python"] == str(folder / stack / "bin" / "python")
        assert rec["adopted"]["python_version"].startswith(python + ".")
        assert rec["framework_version"] == rec["framework_build"]["version"] == version
        assert rec["framework_build"]["file"].startswith(str(folder / stack))  # the interpreter's, not a copy
        assert rec["lock"] == f"{stack}-image" and rec["installer"] == "adopted"
        # what the kit lacked came from the wheels, offline; the framework's extras the wheels lack are named
        assert {"pydantic>=2.6", "psutil>=5.9", "nvidia-ml-py>=12.535"} <= set(rec["from_wheels"])
        assert {m["requirement"] for m in rec["missing"]} >= {"zeus>=0.16", "gymnasium>=1.0"}
        assert all("no wheel of it in" in m["why"] for m in rec["missing"])
        assert not (venvs / stack / "lib" / f"python{python}" / "site-packages" / stacks.get(stack).module).exists()
    assert any(rec["adopted"]["python_version"].startswith("3.12.") for rec in records.values())


def test_the_gpu_script_s_check_passes_without_pythonpath(adopted) -> None:
    """/work/shared/device/gpu-first-run.sh checks the adopted PyTorch stack exactly so, from another folder."""
    venvs, _ = adopted
    code = ("import torch, pydantic, tbdkit.spec; from tbdkit.env import stacks; assert stacks.is_installed('pytorch'); "
            "print(tbdkit.spec.__file__)")
    proc = subprocess.run([str(venvs / "pytorch" / "bin" / "python"), "-c", code], capture_output=True, text=True,
                          env={**without_pythonpath(), "TBDKIT_VENVS": str(venvs)}, cwd="/", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == str(ROOT / "tbdkit" / "spec" / "__init__.py")


def test_doctor_shows_adopted_stacks_as_adopted(adopted, monkeypatch: pytest.MonkeyPatch) -> None:
    venvs, _ = adopted
    monkeypatch.setenv("TBDKIT_VENVS", str(venvs))
    for stack, (python, version) in HELD.items():
        check = doctor.framework_check(stack)
        assert check.ok is True and check.fix is None, check
        assert check.detail.startswith(f"adopted: {stacks.get(stack).module} {version} of ")
        assert f"(Python {python}." in check.detail and "differ from" in check.detail
        assert "--force" not in check.detail and "not current" not in check.detail
        assert stacks.is_current(stack) and stacks.drift(stack)  # the interpreter's own versions, recorded


def test_setup_without_force_keeps_an_adopted_stack(adopted) -> None:
    venvs, records = adopted
    proc = tbdkit("setup", "mxnet", env={"TBDKIT_VENVS": str(venvs)})
    assert proc.returncode == 0, proc.stderr
    assert "MXNet stack: already adopted from" in " ".join(proc.stdout.split())
    assert json.loads((venvs / "mxnet" / stacks.MARKER).read_text()) == records["mxnet"]


def test_a_bench_through_the_adopted_stacks_records_how_they_differ_and_setup_reinstalls_nothing(adopted) -> None:
    venvs, records = adopted
    results = venvs.parent / "results"
    pth = {s: sorted((venvs / s).glob(f"lib/python*/site-packages/{adopt.PTH}")) for s in HELD}
    proc = tbdkit("bench", "--model", "deepspeech2", "--framework", "all", "--preset", "smoke", "--device", "cpu",
                  "--batch", "2", "--max-warmup-s", "1", "--max-measure-s", "2", "--results", str(results), "--setup",
                  "--json", env={"TBDKIT_VENVS": str(venvs)}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summaries = json.loads(proc.stdout)
    assert sorted(s["framework"] for s in summaries) == sorted(HELD)
    for s in summaries:
        stack = s["framework"]
        assert_run_holds(results / s["run_id"], indexed=True)
        env = json.loads((results / s["run_id"] / "env.json").read_text())
        lock = env["lock"]
        assert lock["name"] == f"{stack}-image" and lock["adopted"]["python"] == records[stack]["adopted"]["python"]
        assert "adopted interpreter" in lock["note"]
        assert isinstance(lock["differences"], list) and lock["differences"]  # e.g. the lock's zeus, missing here
        assert {"package": "zeus", "locked": locks.pins(locks.get(f"{stack}-image").file.read_text())["zeus"],
                "installed": None} in lock["differences"]
        assert env["framework_build"]["version"] == HELD[stack][1]
        assert env["host"]["python"].startswith(HELD[stack][0] + ".")
    # --setup installed nothing over them: the same records and overlays
    for stack in HELD:
        assert json.loads((venvs / stack / stacks.MARKER).read_text()) == records[stack]
        assert sorted((venvs / stack).glob(f"lib/python*/site-packages/{adopt.PTH}")) == pth[stack] != []


def test_adopting_over_a_stack_installed_from_its_lock_needs_force(tmp_path, monkeypatch) -> None:
    folder = interpreters()
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path))
    (tmp_path / "mxnet" / "bin").mkdir(parents=True)
    (tmp_path / "mxnet" / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "mxnet" / stacks.MARKER).write_text(json.dumps({"stack": "mxnet", "lock": "mxnet"}))
    with pytest.raises(UserError, match="installed from the kit's lock: pass --force"):
        adopt.adopt("mxnet", str(folder / "mxnet" / "bin" / "python"))


def test_without_the_kit_s_wheels_adoption_says_what_is_missing(tmp_path, monkeypatch) -> None:
    folder = interpreters()
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path))
    with pytest.raises(UserError) as err:
        adopt.adopt("mxnet", str(folder / "mxnet" / "bin" / "python"))
    text = str(err.value)
    assert "does not run the kit" in text and "pydantic>=2.6" in text and "--wheels DIR" in text
    assert not stacks.is_installed("mxnet")


def test_an_interpreter_without_the_framework_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path))
    with pytest.raises(UserError, match=r"has no torch: pass --adopt the Python that holds PyTorch"):
        adopt.adopt("pytorch", sys.executable)  # the kit's own environment holds no framework
    with pytest.raises(UserError, match="No Python at"):
        adopt.adopt("pytorch", str(tmp_path / "nothing"))
    proc = tbdkit("setup", "pytorch", "--wheels", str(tmp_path))
    assert proc.returncode == 2 and "--wheels goes with --adopt" in " ".join(proc.stderr.split())


# ------------------------------------------------------------------ the pieces, without an interpreter


def test_requirements_for_an_interpreter_leave_out_the_framework_and_follow_markers() -> None:
    assert adopt.applies("tomli>=2; python_version < '3.11'", "3.10.13")
    assert not adopt.applies("tomli>=2; python_version < '3.11'", "3.12.1")
    assert adopt.applies("numpy", "3.12.1")
    for stack, module in (("pytorch", "torch"), ("tensorflow", "tensorflow"), ("mxnet", "mxnet")):
        reqs = adopt.wanted(stacks.get(stack), "3.12.1")
        names = {adopt.requirement_name(r) for r in reqs}
        assert module not in names and {"pydantic", "psutil", "zeus"} <= names and "tomli" not in names
    assert "tomli" in {adopt.requirement_name(r) for r in adopt.wanted(stacks.get("mxnet"), "3.10.13")}


def test_constraints_pin_what_they_are_given_and_wheel_names_are_normalized(tmp_path) -> None:
    assert adopt.constraints({"torch": "2.11.0+cu130", "numpy": "1.23.5", "odd": "unknown"}) == (
        "numpy==1.23.5\ntorch==2.11.0+cu130\n")
    for name in ("nvidia_ml_py-13.615.71-py3-none-any.whl", "PyYAML-6.0.2-cp312-cp312-manylinux_2_17_x86_64.whl",
                 "mlperf_logging-4.1.68-py3-none-any.whl", "notes.txt"):
        (tmp_path / name).write_text("")
    assert adopt.wheel_names(tmp_path) == {"nvidia-ml-py", "pyyaml", "mlperf-logging"}


def test_doctor_says_when_the_adopted_interpreter_is_gone_and_never_advises_force(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path))
    (tmp_path / "pytorch" / "bin").mkdir(parents=True)
    (tmp_path / "pytorch" / "bin" / "python").symlink_to(sys.executable)
    record = {"stack": "pytorch", "framework_version": "2.11.0+cu130", "lock": "pytorch-image",
              "lock_file": "locks/pytorch-image-py312.txt",
              "adopted": {"python": "/opt/conda/bin/python", "python_version": "3.12.3",
                          "site_dirs": [str(tmp_path / "gone" / "site-packages")]}}
    (tmp_path / "pytorch" / stacks.MARKER).write_text(json.dumps(record))
    check = doctor.framework_check("pytorch")
    assert check.ok is False and "the adopted interpreter's packages are gone" in check.detail
    assert check.fix.startswith("adopt it again: `tbdkit setup pytorch --adopt /opt/conda/bin/python`")
    assert "--force" not in check.fix and stacks.is_current("pytorch")
