"""`tbdkit setup STACK --adopt PYTHON --wheels DIR`: a stack over an interpreter that already holds its framework,
as on a rented GPU machine or in an NGC container (tbdkit/env/adopt.py).

The interpreters are real ones, made by .ci/adopt-pythons in TBDKIT_ADOPT_PYTHONS (CI makes them once and keeps
them): PyTorch 2.13.0 on Python 3.11, TensorFlow 2.21.0 on Python 3.12, MXNet 1.9.1 on Python 3.10, each with
nothing of the kit's, and a folder of the kit's dependencies as wheels beside each. All three are adopted into
one TBDKIT_VENVS, offline, then MiniGo's network is benched on all three through them with `--setup`, which must not
reinstall. That bench is also the suite's one `tbdkit bench --framework all` on the real framework stacks: its table
(one row a framework, the same network), each framework's math mode, PyTorch's analyses after the window, and each
run's trace and MLPerf log as Perfetto, HTA and MLCommons' checker read them. The stacks installed from the kit's
locks are benched elsewhere (tests/test_every_cell_benches.py: each stack's agent on two or more models through
the CLI; tests/test_corpus_schema.py: a fresh run of each stack through the kit's runner).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from model_checks import assert_run_holds_together, tbdkit
from trace_readers import ARGS, IMPORT_ERRORS, SLICES, hta_parents, perfetto

from tbdkit.core.errors import UserError
from tbdkit.env import adopt, doctor, installer, locks, stacks
from tbdkit.results import mllog
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too
from tbdkit.spec import catalog

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = os.environ.get("TBDKIT_ADOPT_PYTHONS")
# stack -> (its interpreter's Python, the framework version it holds)
HELD = {"pytorch": ("3.11", "2.13.0+cpu"), "tensorflow": ("3.12", "2.21.0"), "mxnet": ("3.10", "1.9.1")}
# The bench's network: the smallest that every framework builds (the adopted stacks and the table are the point, not
# the network; Deep Speech 2 is benched through the whole kit by tests/test_as_typed.py's `make kick-the-tires`)
MODEL = "minigo"


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
    if installer.uv_binary() is not None:  # beside the kit's Python (its test extra): pip resolved, uv unpacked
        log = (venvs / "pytorch.setup.log").read_text()
        assert "--dry-run --report" in log and " pip install --python " in log and "--no-deps --no-index" in log


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


@pytest.fixture(scope="module")
def benched(adopted) -> tuple[Path, list[dict], dict[str, list[Path]]]:
    """MODEL benched on every framework through the adopted stacks with `--setup`: the suite's one
    end-to-end `tbdkit bench --framework all` on the real stacks (its table, each run's files as real tools read
    them); with the overlays' .pth files as they were before it."""
    venvs, _ = adopted
    results = venvs.parent / "results"
    pth = {s: sorted((venvs / s).glob(f"lib/python*/site-packages/{adopt.PTH}")) for s in HELD}
    proc = tbdkit("bench", "--model", MODEL, "--framework", "all", "--preset", "smoke", "--device", "cpu",
                  "--batch", "2", "--max-warmup-s", "1", "--max-measure-s", "2", "--results", str(results), "--setup",
                  "--json", env={"TBDKIT_VENVS": str(venvs)}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return results, json.loads(proc.stdout), pth  # --json: stdout is only the summaries (progress goes to stderr)


def test_a_bench_through_the_adopted_stacks_records_how_they_differ_and_setup_reinstalls_nothing(adopted,
                                                                                                 benched) -> None:
    venvs, records = adopted
    results, summaries, pth = benched
    assert sorted(s["framework"] for s in summaries) == sorted(HELD)
    for s in summaries:
        stack = s["framework"]
        env = json.loads((results / s["run_id"] / "env.json").read_text())
        lock = env["lock"]
        assert lock["name"] == f"{stack}-image" and lock["adopted"]["python"] == records[stack]["adopted"]["python"]
        assert "adopted interpreter" in lock["note"]
        assert isinstance(lock["differences"], list) and lock["differences"]  # e.g. the lock's zeus, missing here
        assert {"package": "zeus", "locked": locks.pins(locks.get(f"{stack}-image").file.read_text())["zeus"],
                "installed": None} in lock["differences"]
        # the interpreter's own framework build ran: its version as the machine and the framework's adapter read it
        assert env["framework_build"]["version"] == env["framework"]["framework_version"] == HELD[stack][1]
        assert env["host"]["python"].startswith(HELD[stack][0] + ".")
    # --setup installed nothing over them: the same records and overlays
    for stack in HELD:
        assert json.loads((venvs / stack / stacks.MARKER).read_text()) == records[stack]
        assert sorted((venvs / stack).glob(f"lib/python*/site-packages/{adopt.PTH}")) == pth[stack] != []


def test_every_framework_of_the_model_benches_into_one_table(benched) -> None:
    results, summaries, _ = benched
    assert [s["framework"] for s in summaries] == list(catalog.get(MODEL).frameworks)
    for s in summaries:
        assert s["status"] in MEASURED, s
        assert s["model_info"]["parameters"] == summaries[0]["model_info"]["parameters"]
        assert_run_holds_together(results / s["run_id"], s, MODEL)
    envs = {s["framework"]: json.loads((results / s["run_id"] / "env.json").read_text())["framework"]
            for s in summaries}
    assert envs["pytorch"]["math_mode"]["tf32_matmul"] is False
    assert envs["tensorflow"]["math_mode"]["tf32_matmul"] is False
    assert envs["mxnet"]["math_mode"]["nvidia_tf32_override"] == "0"


def test_pytorch_s_memory_breakdown_and_flop_count_run_after_the_window(benched) -> None:
    """PyTorch's own analyses (tests/test_bench_cli.py benches the machinery check, which has none): the memory
    breakdown and the FLOP count, each in an iteration of its own after the window."""
    results, summaries, _ = benched
    (torch_summary,) = [s for s in summaries if s["framework"] == "pytorch"]
    torch_run = results / torch_summary["run_id"]
    rows = list(csv.DictReader((torch_run / "iterations.csv").open()))
    after = [r for r in rows if r["phase"] == "analysis"]
    assert len(after) == 2 and rows[-2:] == after
    assert len(rows) == torch_summary["warmup"]["iterations"] + torch_summary["window"]["iterations"] + 2
    memory = json.loads((torch_run / "memory.json").read_text())
    assert memory["unit"] == "bytes" and memory["categories"]["feature_maps"]["bytes"] > 0
    torch_metrics = torch_summary["metrics"]
    assert torch_metrics["model_flops_per_sample"]["value"] > 0 and torch_metrics["mfu"]["value"] is None


def test_real_tools_read_each_framework_s_trace_and_mllog(benched, capsys: pytest.CaptureFixture[str]) -> None:
    """Each run's files as real tools read them: Perfetto's trace processor (the Perfetto UI's, WebAssembly, in
    headless Chromium) imports trace.json without an error, and it and HTA find every iteration inside its phase;
    MLCommons' checker passes mllog.txt but for the rules only a submission meets."""
    results, summaries, _ = benched
    runs = [results / s["run_id"] for s in summaries]
    read = perfetto([run / "trace.json" for run in runs], {"errors": IMPORT_ERRORS, "slices": SLICES, "args": ARGS})
    phases = {"warm-up", "sample window", "analysis"}
    for run in runs:
        got = read[run / "trace.json"]
        assert got["errors"] == [], (run.name, got["errors"])
        assert {s["parent"] for s in got["slices"] if s["name"].startswith("ProfilerStep#")} <= phases, run.name
        assert {s["depth"] for s in got["slices"] if s["name"] in phases} == {0}, run.name
        assert {a["value_type"] for a in got["args"] if a["key"] in ("args.samples", "args.iteration")} == {"int"}
        nested = hta_parents(run / "trace.json")
        assert {nested[name] for name in nested if name.startswith("ProfilerStep#")} <= phases, run.name
        # the checker's command in this process (tests/test_trace.py runs it as a process)
        assert mllog.main([str(run / "mllog.txt")]) == 0, capsys.readouterr().out


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
