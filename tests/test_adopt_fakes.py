"""Adoption's handling, with fake interpreters: small scripts that answer the probe (or run the kit's own Python
over a folder holding a fake framework), where the point is the kit's handling and not the framework.

A failed adoption leaves the old stack as it was (re-adopting over an adopted stack, adopting the stack's own
overlay, --force over a lock-installed stack); an interpreter that answers strangely is one bounded sentence; a
damaged install record, a bad TBDKIT_VENVS or a stack whose python is a folder is one sentence; a full disk
during adoption is one sentence; the constraints pin the framework and what it needs, pure-Python ones as a floor;
a measurement package whose unused dependencies have no wheels goes in when its module imports."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tbdkit.cli.main import app
from tbdkit.core.errors import UserError
from tbdkit.core.paths import venvs_dir
from tbdkit.env import adopt, stacks

KIT_PYTHON = sys.executable  # the kit's own .venv: pydantic and the rest, no framework


def script(path: Path, body: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def interpreter(tmp: Path, name: str, torch: str | None = "2.11.0+fake", base: str = KIT_PYTHON) -> str:
    """A Python that holds a fake torch in a site folder of its own (the kit's Python underneath)."""
    site = tmp / name / "site-packages"
    if torch is not None:
        (site / "torch").mkdir(parents=True, exist_ok=True)
        (site / "torch" / "__init__.py").write_text(f"__version__ = {torch!r}\n")
    site.mkdir(parents=True, exist_ok=True)
    return script(tmp / name / "bin" / "python", f'PYTHONPATH="{site}" exec "{base}" "$@"\n')


def works(venvs: Path) -> str:
    """The stack's python imports the framework and says which; raises when it cannot."""
    python = venvs / "pytorch" / "bin" / "python"
    out = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True,
                         text=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture
def venvs(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "venvs"
    monkeypatch.setenv("TBDKIT_VENVS", str(folder))
    return folder


# ------------------------------------------------------------------ a failed adoption keeps the old stack


def test_re_adopting_over_an_adopted_stack_with_a_failing_check_keeps_the_old_one(tmp_path, venvs) -> None:
    good = interpreter(tmp_path, "good")
    record = adopt.adopt("pytorch", good)
    assert record["framework_version"] == "2.11.0+fake" and works(venvs) == "2.11.0+fake"
    before = (venvs / "pytorch" / stacks.MARKER).read_text()
    bad = interpreter(tmp_path, "bad", torch="9.9", base=sys.base_prefix + "/bin/python3")  # no pydantic: no kit
    with pytest.raises(UserError, match="does not run the kit.*is as it was"):
        adopt.adopt("pytorch", bad)
    assert (venvs / "pytorch" / stacks.MARKER).read_text() == before and works(venvs) == "2.11.0+fake"
    assert [p.name for p in venvs.iterdir() if p.name.startswith(".")] == []  # nothing half-built left beside it


def test_adopting_the_stack_s_own_overlay_adopts_what_it_overlays(tmp_path, venvs) -> None:
    good = interpreter(tmp_path, "good")
    adopt.adopt("pytorch", good)
    record = adopt.adopt("pytorch", str(venvs / "pytorch" / "bin" / "python"))
    assert record["adopted"]["invoked"] == good and works(venvs) == "2.11.0+fake"
    assert not any(str(venvs) in d for d in record["adopted"]["site_dirs"])  # never the overlay's own folder
    # and when the original has lost what the kit needs, the check fails and the overlay stays
    (tmp_path / "good" / "bin" / "python").write_text(
        f'#!/bin/sh\nPYTHONPATH="{tmp_path / "good" / "site-packages"}" exec "{sys.base_prefix}/bin/python3" "$@"\n')
    with pytest.raises(UserError, match="does not run the kit"):
        adopt.adopt("pytorch", str(venvs / "pytorch" / "bin" / "python"))
    assert works(venvs) == "2.11.0+fake" and stacks.marker("pytorch") == record


def test_force_over_a_lock_installed_stack_with_a_failing_check_keeps_it(tmp_path, venvs) -> None:
    (venvs / "pytorch" / "bin").mkdir(parents=True)
    (venvs / "pytorch" / "bin" / "python").symlink_to(interpreter(tmp_path, "locked", torch="2.14.1"))
    (venvs / "pytorch" / stacks.MARKER).write_text(json.dumps({"stack": "pytorch", "lock": "pytorch"}))
    bad = interpreter(tmp_path, "bad", torch="9.9", base=sys.base_prefix + "/bin/python3")
    with pytest.raises(UserError, match="does not run the kit"):
        adopt.adopt("pytorch", bad, force=True)
    assert stacks.marker("pytorch") == {"stack": "pytorch", "lock": "pytorch"} and works(venvs) == "2.14.1"


# ------------------------------------------------------------------ an interpreter that answers strangely

ANSWER = {"python": "/x/python", "version": "3.12.1", "prefix": "/x", "base_prefix": "/x", "site_dirs": [],
          "has_framework": True, "has_pip": False}


@pytest.mark.parametrize(("body", "words"), [
    ("echo '{\"python\": \"/x\", \"vers'", "not JSON"),
    ("echo '" + json.dumps({**ANSWER, "version": "three"}) + "'", "version is 'three'"),
    ("echo '[1, 2]'", "a JSON list, not an object"),
    ("echo '" + json.dumps({k: v for k, v in ANSWER.items() if k != "version"}) + "'", "'version' is None"),
    ("echo '" + json.dumps(ANSWER) + "'; echo 'it broke' >&2; exit 3", "exit 3; its stderr ends: it broke"),
    ("head -c 5000000 /dev/zero | tr '\\0' 'x' >&2; echo 'last words' >&2; exit 1", "last words"),
])  # fmt: skip
def test_an_interpreter_that_answers_the_probe_strangely_is_one_bounded_sentence(tmp_path, venvs, body, words):
    python = script(tmp_path / "odd" / "python", body + "\n")
    start = time.monotonic()
    with pytest.raises(UserError) as err:
        adopt.adopt("pytorch", python)
    text = str(err.value)
    assert words in text and "pass --adopt a python3 executable" in text and len(text) < 1000, text
    assert time.monotonic() - start < 10 and not venvs.exists()


def test_probe_through_the_cli_is_one_sentence_without_a_traceback(tmp_path, venvs) -> None:
    python = script(tmp_path / "odd" / "python", "echo '[1]'\n")
    result = CliRunner().invoke(app, ["setup", "pytorch", "--adopt", python])
    assert result.exit_code == 2 and "a JSON list" in " ".join(result.output.split()) and "Traceback" not in result.output


# ------------------------------------------------------------------ damaged records, bad folders


@pytest.mark.parametrize("content", [b"[1, 2]", b'"a string"', b"true", b"\xff\xfe{not utf-8"])
def test_a_damaged_stack_record_is_said_in_setup_list_and_describe(tmp_path, venvs, content) -> None:
    (venvs / "pytorch" / "bin").mkdir(parents=True)
    (venvs / "pytorch" / "bin" / "python").symlink_to(KIT_PYTHON)
    (venvs / "pytorch" / stacks.MARKER).write_bytes(content)
    runner = CliRunner()
    for args in (["setup", "pytorch"], ["describe", "resnet50", "--framework", "pytorch"]):
        result = runner.invoke(app, args)
        text = " ".join(result.output.split())
        assert result.exit_code == 2 and "is damaged" in text and "tbdkit setup pytorch --force" in text, text
        assert result.exception is None or isinstance(result.exception, SystemExit)
    result = runner.invoke(app, ["list"])
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "damaged" in text and "tbdkit setup pytorch --force" in text, text


def test_a_stack_whose_python_is_a_folder_is_one_sentence(venvs) -> None:
    (venvs / "pytorch" / "bin" / "python").mkdir(parents=True)
    (venvs / "pytorch" / stacks.MARKER).write_text("{}")
    with pytest.raises(stacks.DamagedStack, match=r"interpreter .*python is a folder: run `tbdkit setup pytorch"):
        stacks.require("pytorch")


@pytest.mark.parametrize("case", ["file", "under-file", "proc", "devnull", "dangling", "empty"])
def test_a_tbdkit_venvs_that_is_not_a_folder_is_one_sentence(tmp_path, monkeypatch, case) -> None:
    (tmp_path / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    value = {"file": str(tmp_path / "f"), "under-file": str(tmp_path / "f" / "venvs"), "proc": "/proc/venvs",
             "devnull": "/dev/null", "dangling": str(tmp_path / "link"), "empty": ""}[case]  # fmt: skip
    monkeypatch.setenv("TBDKIT_VENVS", value)
    with pytest.raises(UserError, match="TBDKIT_VENVS"):
        venvs_dir()
    result = CliRunner().invoke(app, ["setup", "pytorch", "--adopt", KIT_PYTHON])
    assert result.exit_code == 2 and "TBDKIT_VENVS" in result.output and result.output.count("\n") <= 3
    assert not (Path.cwd() / "pytorch").exists()


def test_a_full_disk_during_adoption_is_one_sentence_and_keeps_the_old_stack(tmp_path, venvs) -> None:
    good = interpreter(tmp_path, "good")
    adopt.adopt("pytorch", good)
    code = ("import sys; from tbdkit.core.errors import UserError; from tbdkit.env import adopt\n"
            "try:\n    adopt.adopt('pytorch', sys.argv[1])\nexcept UserError as e:\n    print(e); sys.exit(2)\n")

    huge = tmp_path / "huge" / "site-packages"  # a .pth larger than the file size limit: it cannot be written
    dirs = [str(huge / f"d{i:04d}-{'x' * 60}") for i in range(200)]
    said = json.dumps({**ANSWER, "python": good, "site_dirs": dirs})
    size = len(said) + 3000  # the probe's answer fits; the .pth (each folder with `import site; ...`) does not

    def limit() -> None:  # a write past the limit fails with EFBIG, as a full disk fails with ENOSPC
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    python = script(tmp_path / "huge" / "bin" / "python",
                    f'case "$2" in *has_framework*) echo \'{said}\'; exit 0;; esac\nexec "{good}" "$@"\n')
    proc = subprocess.run([KIT_PYTHON, "-c", code, python], capture_output=True, text=True, timeout=120,
                          preexec_fn=limit, env={**os.environ, "TBDKIT_VENVS": str(venvs)})
    assert proc.returncode == 2 and "filled while adopting" in proc.stdout and "as it was" in proc.stdout, (
        proc.stdout + proc.stderr)
    assert works(venvs) == "2.11.0+fake"


# ------------------------------------------------------------------ what is pinned, what is installed


def _dist(site: Path, name: str, version: str, requires: list[str], pure: bool) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nRoot-Is-Purelib: {'true' if pure else 'false'}\n")


def test_the_constraints_pin_the_framework_and_what_it_needs_pure_python_as_a_floor(tmp_path) -> None:
    site = tmp_path / "site-packages"
    _dist(site, "torch", "2.11.0+cu130", ["typing-extensions>=4.10.0", "numpy", "opt-einsum>=3.3; extra == 'opt'"],
          pure=False)
    _dist(site, "typing_extensions", "4.10.0", [], pure=True)
    _dist(site, "numpy", "2.1.0", [], pure=False)
    _dist(site, "opt_einsum", "3.3.0", [], pure=True)
    _dist(site, "pydantic", "2.0.0", [], pure=True)  # the interpreter's, not the framework's: free to change
    pinned, pure = adopt.framework_closure([str(site)], {"torch"})
    assert pinned == {"torch": "2.11.0+cu130", "typing-extensions": "4.10.0", "numpy": "2.1.0"}
    assert adopt.constraints(pinned, pure) == "numpy==2.1.0\ntorch==2.11.0+cu130\ntyping-extensions>=4.10.0\n"


def _wheel(folder: Path, name: str, files: dict[str, str], requires: list[str]) -> None:
    info = f"{name}-0.16.0.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.16.0\n"
             + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rows = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*rows, f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / f"{name}-0.16.0-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


def test_a_measurement_package_whose_unused_dependencies_have_no_wheels_is_installed_and_said(tmp_path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "zeus", {"zeus/__init__.py": "", "zeus/monitor.py": "class ZeusMonitor: ...\n"}, ["tyro", "amdsmi"])
    env = tmp_path / "overlay"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(env)], check=True)
    overlay = env / "bin" / "python"
    pip = [KIT_PYTHON, "-m", "pip", "--disable-pip-version-check", "--python", str(overlay)]
    with (tmp_path / "log").open("w") as log:
        done, failed, notes = adopt.install_from_wheels(pip, overlay, wheels, ["zeus>=0.16"], "", tmp_path, log)
    assert done == ["zeus>=0.16"] and failed == []
    assert "installed without its declared dependencies" in notes[0] and "zeus.monitor imports" in notes[0]
    assert subprocess.run([str(overlay), "-c", "import zeus.monitor"]).returncode == 0


@pytest.mark.parametrize("unpacker", ["uv", "pip"])
def test_wheels_go_in_as_pip_resolves_them_beside_what_the_interpreter_holds(tmp_path, monkeypatch, unpacker) -> None:
    """pip resolves (it sees the adopted interpreter's packages through the overlay's .pth, which uv does not);
    uv, where installed, unpacks what pip chose; without uv pip installs: either way a package the interpreter
    holds is not installed again in the overlay, and what it lacks is."""
    from tbdkit.env import installer

    if unpacker == "uv" and installer.uv_binary() is None:
        pytest.skip("no uv beside the kit's Python or on PATH")
    if unpacker == "pip":
        monkeypatch.setattr(installer, "uv_binary", lambda: None)
    wheels, held = tmp_path / "wheels", tmp_path / "adopted" / "site-packages"
    wheels.mkdir()
    _wheel(wheels, "kitdep", {"kitdep/__init__.py": ""}, ["shared>=0.16"])
    _wheel(wheels, "shared", {"shared/__init__.py": "WHERE = 'wheel'\n"}, [])
    _dist(held, "shared", "0.16.0", [], pure=True)
    (held / "shared").mkdir()
    (held / "shared" / "__init__.py").write_text("WHERE = 'interpreter'\n")
    env = tmp_path / "overlay"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(env)], check=True)
    overlay = env / "bin" / "python"
    purelib = subprocess.run([str(overlay), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, adopt.PTH).write_text(f"import site; site.addsitedir({str(held)!r})\n")
    pip = [KIT_PYTHON, "-m", "pip", "--disable-pip-version-check", "--python", str(overlay)]
    with (tmp_path / "log").open("w") as log:
        done, failed, notes = adopt.install_from_wheels(pip, overlay, wheels, ["kitdep"], "", tmp_path, log)
    assert done == ["kitdep"] and failed == [] and notes == []
    assert sorted(p.name for p in Path(purelib).iterdir() if p.name.startswith(("kitdep", "shared"))) == [
        "kitdep", "kitdep-0.16.0.dist-info"]
    got = subprocess.run([str(overlay), "-c", "import kitdep, shared; print(shared.WHERE)"], capture_output=True,
                         text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert got.stdout.strip() == "interpreter", got.stderr
    unpacked = [line for line in (tmp_path / "log").read_text().splitlines() if " pip install --python " in line]
    assert len(unpacked) == (unpacker == "uv") and all("--no-deps" in line for line in unpacked)
