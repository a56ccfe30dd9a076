"""What the real-container tests share (tests/test_docker_real*.py): the daemon check, a stack's CI image
built once per test module (docker/ci/build-ci-image.sh: a base from mmdebstrap, no registry), the kit
installed where an unprivileged user can read it, and `tbdkit bench --launcher docker` run by that user.

Each stack's images are tested in a file of their own, so `make test`'s workers build them side by side
(build-ci-image.sh and make-base.sh lock what the builds share)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tbdkit.env import cpus, images, installer
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too
from run_invariants import assert_run_holds

ROOT = Path(__file__).resolve().parents[1]
UID = GID = 4242  # an unprivileged user that owns nothing on this machine
# MiniGo: the model whose smoke bench costs least on every stack (TensorFlow traces Deep Speech 2's GRU and profiles
# it for a minute on a busy machine, MiniGo's small convolutions in seconds); the caps end warm-up and the window
# after a second each, every phase still run.
MODEL = "minigo"
FAST = ["--model", MODEL, "--preset", "smoke", "--device", "cpu", "--batch", "2",
        "--max-warmup-s", "1", "--max-measure-s", "1"]
# Where the stand-in base's pip put the framework (NGC's images: the system Python's site-packages).
SYSTEM_SITE = "/usr/local/lib/python3"


def daemon_problem() -> str | None:
    """Why no daemon can be used (it could not be started, or outside CI there is none), else None."""
    if os.environ.get("TBDKIT_DOCKERD_ERROR"):
        return os.environ["TBDKIT_DOCKERD_ERROR"]
    try:
        images.daemon_version()
    except Exception as exc:  # UserError: no docker, daemon down
        if os.environ.get("CI"):
            pytest.fail(f"dockerd was started by .ci/run but is not usable: {exc}")
        return str(exc)
    return None


def skip_without_daemon() -> None:
    problem = daemon_problem()
    if problem:
        print(f"skipping the real-container test: {problem}")
        pytest.skip(f"no Docker daemon: {problem}")


def storage_driver() -> str:
    return images.docker("info", "--format", "{{.Driver}}").stdout.strip()


def build_ci_image(stack: str, tag: str | None = None) -> tuple[str, dict]:
    """The stack's CI image, built by docker/ci/build-ci-image.sh: its tag and `images.inspect_image`'s record."""
    tag = tag or f"tbdkit-ci/{stack}:cpu"
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "docker/ci/build-ci-image.sh"), tag, stack], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHON": sys.executable}, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    built = images.inspect_image(tag)
    assert built is not None
    print(f"CI image {tag}: built in {time.monotonic() - t0:.0f} s, {built['size_bytes'] / 2**20:.0f} MiB")
    print("\n".join(line for line in proc.stdout.splitlines() if line.startswith("make-standin:")))  # its steps' times
    return tag, built


def stack_state(image: str, stack: str) -> dict:
    """Inside the image: the stack registered (so `tbdkit bench` there, as under compose, runs natively),
    as the image's build recorded it (the framework's file as the build imported it). The framework is not
    imported here: the bench's env.json says which file its run imported (`assert_base_framework_ran`)."""
    probe = (f"import json; from tbdkit.env import stacks; s = stacks.get({stack!r}); "
             "print(json.dumps({'installed': stacks.is_installed(s.name), "
             "'file': (stacks.marker(s.name) or {}).get('framework_file')}))")
    proc = images.docker("run", "--rm", "--network", "none", image, "python", "-c", probe, timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_base_framework_kept(image: str, stack: str) -> None:
    """The image registers the stack, whose framework (as its build imported it) is the one its stand-in
    base holds (no other install)."""
    state = stack_state(image, stack)
    assert state["installed"] is True and state["file"].startswith(SYSTEM_SITE), state


def assert_base_framework_ran(env: dict, version: str) -> None:
    """The run's agent imported the stand-in base's own framework build (env.json's framework_build)."""
    build = env["framework_build"]
    assert build["version"] == version and build["file"].startswith(SYSTEM_SITE), build


@pytest.fixture
def results():
    """A results folder the unprivileged user can reach (pytest's own tmp dirs are root-only)."""
    top = Path(tempfile.mkdtemp(prefix="tbdkit-docker-"))
    top.chmod(0o755)
    yield top / "results"
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def user_kit():
    """The kit installed as a user would have it, where the unprivileged user can read it (the
    checkout may sit in a root-only folder): a plain install of the checkout into a folder (`uv pip install
    --target`, from the indexes pip is configured with: 3 CPU seconds here against pip's 46, which also
    compiles every module; the user's processes compile what they import), and a copy of the workloads."""
    skip_without_daemon()
    top = Path(tempfile.mkdtemp(prefix="tbdkit-kit-"))
    top.chmod(0o755)
    # built from a copy: setuptools builds in the source tree, and the other modules' kits build beside this one
    source = top / "source"
    shutil.copytree(ROOT / "tbdkit", source / "tbdkit", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    uv = installer.uv_binary()
    assert uv, "uv is missing from the kit's environment (make .venv/.tbdkit-installed installs it)"
    proc = subprocess.run([uv, "pip", "install", "--quiet", "--python", sys.executable,
                           *installer.pip_index_options(installer.pip_config()), "--target", str(top / "site"),
                           str(source)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.copytree(ROOT / "workloads", top / "site" / "workloads")  # the kit's own, beside its installed code
    subprocess.run(["chmod", "-R", "a+rX", str(top)], check=True)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def user_python() -> str:
    """A Python of this one's version that the unprivileged user can run (this venv's base may
    sit in root's home)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (os.path.realpath(sys.executable), f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if not Path(candidate).exists():
            continue
        if os.getuid() != 0:
            return candidate
        probe = subprocess.run(["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups", candidate, "-c", ""],
                               capture_output=True)
        if probe.returncode == 0:
            return candidate
    pytest.fail(f"no {version} that uid {UID} can run (apt-get install {version})")


def bench_as_user(kit: Path, results: Path, image: str, stack: str = "pytorch",
                  cores: list[int] | None = None) -> subprocess.CompletedProcess:
    """`tbdkit bench --launcher docker` run by uid 4242 (in the docker group), as a user would; on `cores`
    (taskset) where given."""
    results.mkdir(parents=True, exist_ok=True)
    os.chown(results, UID, GID)
    docker_gid = os.stat("/var/run/docker.sock").st_gid
    env = {**os.environ, f"TBDKIT_IMAGE_{stack.upper()}": image, "HOME": str(results),
           "PYTHONPATH": str(kit / "site")}
    env.pop("VIRTUAL_ENV", None)
    cmd = [user_python(), "-m", "tbdkit.cli", "bench", *FAST, "--framework", stack, "--launcher", "docker",
           "--results", str(results)]
    if os.getuid() == 0:
        cmd = ["setpriv", f"--reuid={UID}", f"--regid={GID}", f"--groups={docker_gid}", *cmd]
    if cores is not None:
        cmd = ["taskset", "--cpu-list", cpus.cpu_list(cores), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=results, timeout=600)


def invoking_uid() -> int:
    """Who owns a run's files: the invoking user, 4242 when the test runs as root."""
    return os.getuid() or UID


def assert_removed(name: str, within_s: float = 300) -> None:
    """The launcher removes the container in the background; vfs makes that take a while."""
    deadline = time.monotonic() + within_s
    while name in images.docker("ps", "--all", "--format", "{{.Names}}").stdout.split():
        assert time.monotonic() < deadline, f"container {name} was not removed"
        time.sleep(2)


def only_run(results: Path) -> Path:
    """The one run folder of `results`, checked whole (tests/run_invariants.py)."""
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    assert_run_holds(run)
    return run


def check_stack_bench(stack: str, tag: str, built: dict, kit: Path, results: Path) -> dict:
    """The stack's framework in the base's site-packages and registered, then the MiniGo bench in
    `tag` run by the unprivileged user: measured, every file of the run theirs, the image recorded, the
    container removed. Returns the run's env.json."""
    assert_base_framework_kept(tag, stack)
    t0 = time.monotonic()
    proc = bench_as_user(kit, results, tag, stack)
    print(f"docker bench ({stack}): {time.monotonic() - t0:.1f} s")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out
    run = only_run(results)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] in MEASURED and summary["framework"] == stack, summary
    assert summary["metrics"]["throughput"]["value"] > 0
    env = json.loads((run / "env.json").read_text())
    assert env["container"]["image"] == tag and env["container"]["image_id"] == built["id"]
    assert env["container"]["base_image"] == f"tbdkit-ci/{stack}-base"
    assert {path.stat().st_uid for path in run.iterdir()} == {invoking_uid()}
    assert_removed(f"tbdkit-{run.name}")
    return env
