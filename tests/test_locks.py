"""The locks (locks/*.txt) against pyproject.toml, and an environment's differences from its lock as
`tbdkit doctor`, env.json and `tbdkit setup` see them (a tiny throwaway venv, never a framework stack)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tbdkit.env import doctor
from tbdkit.env import installer
from tbdkit.env import locks
from tbdkit.env import stacks
from tbdkit.core.paths import KIT_ROOT

ENVS = sorted(locks.ENVS)


def _requirements(env: locks.LockEnv) -> list[Requirement]:
    """The direct requirements of env that apply on its Python (markers evaluated for it)."""
    project = locks.pyproject()
    extras = project.get("optional-dependencies", {})
    reqs = [Requirement(r) for r in project["dependencies"] + [r for e in env.extras for r in extras[e]]]
    marker_env = {"python_version": env.python, "python_full_version": f"{env.python}.0", "extra": ""}
    return [r for r in reqs if r.marker is None or r.marker.evaluate(marker_env)]


@pytest.mark.parametrize("name", ENVS)
def test_each_lock_was_made_from_pyproject_as_it_is(name: str) -> None:
    env = locks.get(name)
    assert env.file.is_file(), f"{env.file} is missing: run `make lock`"
    text = env.file.read_text()
    assert locks.recorded_inputs_digest(text) == locks.inputs_digest(env), (
        f"pyproject.toml's requirements for '{name}' changed since {env.file.name} was made: run `make lock`")
    pins = locks.pins(text)
    for req in _requirements(env):
        key = locks.normalize(req.name)
        assert key in pins, f"{req} (pyproject.toml) is not in {env.file.name}: run `make lock`"
        assert req.specifier.contains(pins[key], prereleases=True), (
            f"{env.file.name} pins {req.name}=={pins[key]}, outside pyproject.toml's {req}: run `make lock`")


@pytest.mark.parametrize("name", ENVS)
def test_every_package_of_a_lock_is_pinned_with_a_hash(name: str) -> None:
    blocks = [b for b in locks.get(name).file.read_text().split("\n") if b and not b.startswith(("#", " "))]
    assert blocks, name
    for line in blocks:
        assert "==" in line and line.rstrip().endswith("\\"), f"{name}: not pinned with hashes: {line}"


def test_the_inputs_digest_follows_the_extras_and_the_python() -> None:
    project = locks.pyproject()
    env = locks.get("mxnet")
    changed = {**project, "optional-dependencies": {**project["optional-dependencies"], "mxnet": ["mxnet==1.9.0"]}}
    assert locks.inputs_digest(env, changed) != locks.inputs_digest(env, project)
    other_stack = {**project, "optional-dependencies": {**project["optional-dependencies"], "pytorch": ["torch"]}}
    assert locks.inputs_digest(env, other_stack) == locks.inputs_digest(env, project)
    assert locks.inputs_digest(locks.get("mxnet-image"), project) != locks.inputs_digest(env, project)


def test_pins_differences_and_local_labels() -> None:
    text = ("# header\nTorch==2.14.1 \\\n    --hash=sha256:00\nzope.interface==7.0 ; python_version < '3.12'\n"
            "    # via x\n")
    pins = locks.pins(text)
    assert pins == {"torch": "2.14.1", "zope-interface": "7.0"}
    have = {"torch": "2.14.1+cu130", "zope-interface": "7.1", "pip": "24.0", "six": "1.17.0"}
    assert locks.differences(pins, have) == [
        {"package": "six", "locked": None, "installed": "1.17.0"},
        {"package": "zope-interface", "locked": "7.0", "installed": "7.1"}]
    assert locks.differences(pins, {"torch": "2.14.1"}) == [
        {"package": "zope-interface", "locked": "7.0", "installed": None}]


def test_uv_is_given_the_indexes_pip_is_configured_with() -> None:
    config = ("global.find-links='/opt/wheels'\n"
              "global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'\n"
              ":env:.find-links='/opt/wheels'\nglobal.cert='/etc/ssl/certs/ca.crt'\n")
    assert installer.pip_index_options(config) == [
        "--find-links", "/opt/wheels", "--extra-index-url", "file:///opt/a/simple",
        "--extra-index-url", "file:///opt/b/simple", "--index-strategy", "unsafe-best-match"]
    assert installer.pip_index_options("") == []
    uv_cmds = installer.commands("uv", "/bin/uv", Path("/v/bin/python"), Path("/k/locks/x.txt"), Path("/k"))
    assert uv_cmds[0][:3] == ["/bin/uv", "pip", "sync"] and "--require-hashes" in uv_cmds[0]
    assert "--compile-bytecode" in uv_cmds[0]  # as pip does by default: imports need not compile the sources
    pip_cmds = installer.commands("pip", None, Path("/v/bin/python"), Path("/k/locks/x.txt"), Path("/k"))
    assert pip_cmds[0][-5:] == ["install", "--require-hashes", "--no-deps", "-r", "/k/locks/x.txt"]
    assert pip_cmds[1][-3:] == ["--no-deps", "-e", "/k"]


# ------------------------------------------------ a stack whose packages differ from its lock

TINY = "iniconfig"  # a pure-Python wheel of a few kB


@pytest.fixture(scope="module")
def tiny_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A venv (no pip of its own) holding one tiny package, installed by the kit's pip; its version."""
    venv = tmp_path_factory.mktemp("venvs") / "mxnet"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                           "--no-deps", TINY], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"{TINY} could not be installed from this machine's indexes: {proc.stderr.strip()[-300:]}")
    have = locks.installed(locks.site_packages(venv))
    return venv, have[TINY]


def _fake_lock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pins: str) -> Path:
    folder = tmp_path / "locks"
    folder.mkdir(exist_ok=True)
    (folder / locks.get("mxnet").file.name).write_text(f"# a lock\n{pins}")
    monkeypatch.setattr(locks, "LOCKS_DIR", folder)
    return folder


def _install_record(venv: Path) -> None:
    (venv / stacks.MARKER).write_text(json.dumps({
        "stack": "mxnet", "framework_version": "1.9.1", "lock": "mxnet",
        "requirements_digest": stacks._requirements_digest(stacks.get("mxnet"))}))


def test_doctor_names_each_package_that_differs_and_the_fix(tiny_venv, tmp_path, monkeypatch) -> None:
    venv, version = tiny_venv
    monkeypatch.setenv("TBDKIT_VENVS", str(venv.parent))
    _fake_lock(monkeypatch, tmp_path, f"{TINY}=={version} \\\n    --hash=sha256:00\n")
    _install_record(venv)
    same = doctor.framework_check("mxnet")
    assert same.ok is True and same.fix is None and "matches mxnet-py311.txt" in same.detail
    _fake_lock(monkeypatch, tmp_path, f"{TINY}==0.0.1 \\\n    --hash=sha256:00\nsix==1.17.0 \\\n    --hash=sha256:00\n")
    _install_record(venv)  # installed from this lock, which its packages no longer match
    check = doctor.framework_check("mxnet")
    assert check.ok is False and check.fix == "run `tbdkit setup mxnet --force` (reinstalls it from its lock)"
    assert f"{TINY} {version} (locked 0.0.1)" in check.detail and "six missing (locked 1.17.0)" in check.detail
    assert stacks.drift("mxnet") == [{"package": TINY, "locked": "0.0.1", "installed": version},
                                     {"package": "six", "locked": "1.17.0", "installed": None}]
    # `tbdkit setup` (pip) uninstalls what the lock does not name
    assert installer.beyond_lock("six==1.17.0 \\\n", venv) == [TINY]


def test_env_json_records_the_lock_and_the_differences(tiny_venv, tmp_path, monkeypatch) -> None:
    """Run inside the tiny venv itself, as the agent runs inside a stack: its install record names the lock."""
    venv, version = tiny_venv
    monkeypatch.setenv("TBDKIT_VENVS", str(venv.parent))
    folder = _fake_lock(monkeypatch, tmp_path, f"{TINY}==0.0.1 \\\n    --hash=sha256:00\n")
    _install_record(venv)
    code = ("import json, sys; from pathlib import Path; from tbdkit.env import locks; "
            "locks.LOCKS_DIR = Path(sys.argv[1]); print(json.dumps(locks.this_environment()))")
    env = {**os.environ, "PYTHONPATH": str(KIT_ROOT)}
    env.pop("TBDKIT_IMAGE", None)
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", code, str(folder)], capture_output=True, text=True,
                          env=env, check=True)
    state = json.loads(proc.stdout)
    assert state["name"] == "mxnet" and state["file"] == "locks/mxnet-py311.txt"
    assert state["digest"] == locks.digest(folder / "mxnet-py311.txt") == state["installed_from_digest"]
    assert state["differences"] == [{"package": TINY, "locked": "0.0.1", "installed": version}]


def test_env_json_has_a_lock_entry_without_an_install_record() -> None:
    from tbdkit.env import machine as envinfo

    lock = envinfo.collect({}, 0)["lock"]
    assert set(lock) >= {"name", "digest", "differences"}
    assert lock["name"] in locks.ENVS or lock["reason"]


# ------------------------------------------------ the stacks in TBDKIT_VENVS against their locks

@pytest.mark.parametrize("name", sorted(n for n in stacks.STACKS if not stacks.is_kit_env(n)))  # numpy: the kit's own
def test_each_installed_stack_holds_exactly_its_lock(name: str) -> None:
    """What `pip freeze` would list (every distribution in the stack's site-packages) against the lock;
    `tbdkit setup` installs from the lock, so an installed stack differs only if someone changed it."""
    if not stacks.is_installed(name):
        pytest.skip(f"the {name} stack is not installed in {stacks.venv_path(name)}")
    drift = stacks.drift(name)
    assert drift == [], (f"the {name} stack in {stacks.venv_path(name)} differs from its lock: "
                         f"{doctor.drift_text(drift or [], shown=50)}; run `tbdkit setup {name} --force`")


# ------------------------------------------------ bundles carry the locks; reproduce checks them

def _bundle_of_one_mxnet_run(tmp_path: Path) -> Path:
    from tbdkit.artifact import bundle as artifact

    run = tmp_path / "results" / "r1"
    run.mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps({"model": "resnet50", "framework": "mxnet", "batch_size": 2}))
    (run / "summary.json").write_text(json.dumps({"run_id": "r1", "status": "ok", "model": "resnet50",
                                                  "framework": "mxnet", "batch_size": 2}))
    lock = locks.state(locks.get("mxnet"), paths=[])
    (run / "env.json").write_text(json.dumps({"lock": lock}))
    out = tmp_path / "a.tar.gz"
    artifact.bundle(tmp_path / "results", out)
    return out


def test_a_bundle_carries_the_lock_its_runs_were_made_on_and_reproduce_checks_it(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from tbdkit.artifact import bundle as artifact
    from tbdkit.bench import run_list
    from tbdkit.cli import app

    bundle = _bundle_of_one_mxnet_run(tmp_path)
    manifest, files = artifact.read(bundle)
    lock_file = locks.get("mxnet").file
    assert files["locks/mxnet-py311.txt"] == lock_file.read_bytes()
    assert manifest["locks"]["locks/mxnet-py311.txt"]["digest"] == locks.digest(lock_file)
    assert artifact.lock_mismatches(files, ["r1"]) == []
    # this kit's mxnet lock moves on: numpy pinned elsewhere
    text = lock_file.read_text()
    numpy = locks.pins(text)["numpy"]
    _fake_lock(monkeypatch, tmp_path, text.replace(f"numpy=={numpy} ", "numpy==1.23.4 "))
    (mismatch,) = artifact.lock_mismatches(files, ["r1"])
    assert mismatch["lock"] == "mxnet" and mismatch["recorded_digest"] != mismatch["digest_here"]
    assert mismatch["differences"] == [{"package": "numpy", "recorded": numpy, "here": "1.23.4"}]
    ran: list[object] = []

    def fake_run_all(specs, results, unit, quiet_stdout=False):
        ran.append(specs)
        return [{"run_id": "new", "status": "ok", "metrics": {}}]

    monkeypatch.setattr(run_list, "run_all", fake_run_all)
    refused = CliRunner().invoke(app, ["reproduce", str(bundle), "--results", str(tmp_path / "new")])
    assert refused.exit_code == 2 and ran == []  # a UserError: one sentence, exit 2
    assert "another lock" in refused.output and f"numpy {numpy} -> 1.23.4" in refused.output
    assert "--force" in refused.output and "Traceback" not in refused.output
    forced = CliRunner().invoke(app, ["reproduce", str(bundle), "--results", str(tmp_path / "new"), "--force",
                                      "--yes"])
    assert forced.exit_code == 0, forced.output
    assert len(ran) == 1 and f"numpy {numpy} -> 1.23.4" in forced.output
    (report,) = (tmp_path / "new").glob("reproduce-*.json")
    assert json.loads(report.read_text())["lock_mismatches"][0]["differences"] == mismatch["differences"]


def test_the_makefile_installs_the_kit_from_its_lock_and_regenerates_the_locks() -> None:
    import re

    makefile = (KIT_ROOT / "Makefile").read_text()
    (kit_lock,) = re.findall(r"^KIT_LOCK := (\S+)$", makefile, flags=re.M)
    assert KIT_ROOT / kit_lock == locks.get("kit-test").file
    recipe = makefile.split("$(KIT_STAMP): pyproject.toml $(KIT_LOCK)\n", 1)[1].split("\n\n", 1)[0]
    assert "--require-hashes --no-deps -r $(KIT_LOCK)" in recipe and "--no-deps -e ." in recipe
    assert "\nlock: $(KIT_STAMP)\n\t$(VENV)/bin/python -m tbdkit.env.lockgen\n" in makefile
    # uv installs the lock, from the indexes that the kit's installer reads from pip's configuration
    assert "$$($(VENV)/bin/python -m tbdkit.env.installer)" in recipe


def test_the_installer_prints_pips_indexes_for_uv_on_the_standard_library_alone() -> None:
    """The Makefile runs it before the kit's dependencies are installed: -S leaves site-packages out (the pip
    it asks for the configuration is another process, with its own)."""
    proc = subprocess.run([sys.executable, "-S", "-m", "tbdkit.env.installer"], cwd=KIT_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == installer.pip_index_options(installer.pip_config())


def test_make_lock_asks_uv_for_hashes_for_each_locks_python_and_extras() -> None:
    from tbdkit.env import lockgen

    env = locks.get("mxnet-image")
    cmd = lockgen.compile_command("uv", env, Path("/tmp/out.txt"))
    assert cmd[:3] == ["uv", "pip", "compile"] and "--generate-hashes" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.10" and cmd[cmd.index("--extra") + 1] == "mxnet"
    assert cmd.count("--extra") == 1 and cmd[cmd.index("--python-platform") + 1] == locks.PLATFORM


@pytest.mark.parametrize("upgrade", [False, True])
def test_make_lock_keeps_the_present_pins_unless_asked_to_upgrade(tmp_path, monkeypatch, upgrade) -> None:
    """uv prefers the pins of the output file it is given: `make lock` hands it the present lock, so adding
    one requirement does not move every other package; --upgrade hands it nothing."""
    from tbdkit.env import lockgen

    present = tmp_path / "kit-py311.txt"
    present.write_text("# old header\nrich==13.0.0 \\\n    --hash=sha256:00\n")
    monkeypatch.setattr(locks, "LOCKS_DIR", tmp_path)
    seen: dict[str, str | None] = {}

    def fake_uv(cmd, **_):
        out = Path(cmd[cmd.index("-o") + 1])
        seen["before"] = out.read_text() if out.exists() else None
        out.write_text("rich==13.0.0 \\\n    --hash=sha256:00\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(lockgen.subprocess, "run", fake_uv)
    lockgen.generate(locks.get("kit"), "uv", upgrade=upgrade)
    assert seen["before"] == (None if upgrade else "# old header\nrich==13.0.0 \\\n    --hash=sha256:00\n")
    assert present.read_text().startswith("# tbdkit lock 'kit'") and "rich==13.0.0" in present.read_text()
