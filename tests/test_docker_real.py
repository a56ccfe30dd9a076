"""A real container: build the pytorch stack's image on a Debian bookworm base made here (no
registry), run `tbdkit bench --launcher docker` as an unprivileged user, and check that the run
directory lands on the mounted volume owned by that user with the image recorded; then a
container that crashes, which must leave its log and a failed summary.

Needs a running Docker daemon (.ci/run installs docker.io and starts dockerd). It skips only
when the daemon could not be started (.ci/run says why in TBDKIT_DOCKERD_ERROR), or, outside
CI, when there is no daemon."""

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

from tbdkit.env import cpus, images
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

ROOT = Path(__file__).resolve().parents[1]
TAG = "tbdkit-ci/pytorch:cpu"
CRASH_TAG = "tbdkit-ci/pytorch:crash"
UID = GID = 4242  # an unprivileged user that owns nothing on this machine
FAST = ["--model", "deepspeech2", "--preset", "smoke", "--device", "cpu", "--batch", "2",
        "--max-warmup-s", "3", "--max-measure-s", "4"]

pytestmark = pytest.mark.slow


def daemon_problem() -> str | None:
    if os.environ.get("TBDKIT_DOCKERD_ERROR"):
        return os.environ["TBDKIT_DOCKERD_ERROR"]
    try:
        images.daemon_version()
    except Exception as exc:  # UserError: no docker, daemon down
        if os.environ.get("CI"):
            pytest.fail(f"dockerd was started by .ci/run but is not usable: {exc}")
        return str(exc)
    return None


@pytest.fixture(scope="module")
def ci_image():
    problem = daemon_problem()
    if problem:
        print(f"skipping the real-container test: {problem}")
        pytest.skip(f"no Docker daemon: {problem}")
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "docker/ci/build-ci-image.sh"), TAG], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHON": sys.executable}, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    found = images.inspect_image(TAG)
    assert found is not None
    print(f"CI image {TAG}: built in {time.monotonic() - t0:.0f} s, {found['size_bytes'] / 2**20:.0f} MiB")
    state = stack_state(TAG, "pytorch")
    assert state["installed"] is True and state["file"].startswith(SYSTEM_SITE), state
    return found


@pytest.fixture
def results():
    """A results folder the unprivileged user can reach (pytest's own tmp dirs are root-only)."""
    top = Path(tempfile.mkdtemp(prefix="tbdkit-docker-"))
    top.chmod(0o755)
    yield top / "results"
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def user_kit(ci_image):
    """The kit installed as a user would have it, where the unprivileged user can read it (the
    checkout may sit in a root-only folder): a plain `pip install --target` from the wheels the
    image build downloaded, and a copy of the workloads."""
    top = Path(tempfile.mkdtemp(prefix="tbdkit-kit-"))
    top.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
                           str(ROOT / "docker" / "wheels"), "--target", str(top / "site"), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.copytree(ROOT / "workloads", top / "workloads")
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
           "PYTHONPATH": str(kit / "site"), "TBDKIT_WORKLOADS": str(kit / "workloads")}
    env.pop("VIRTUAL_ENV", None)
    cmd = [user_python(), "-m", "tbdkit.cli", "bench", *FAST, "--framework", stack, "--launcher", "docker",
           "--results", str(results)]
    if os.getuid() == 0:
        cmd = ["setpriv", f"--reuid={UID}", f"--regid={GID}", f"--groups={docker_gid}", *cmd]
    if cores is not None:
        cmd = ["taskset", "--cpu-list", cpus.cpu_list(cores), *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=results, timeout=600)


def assert_removed(name: str, within_s: float = 300) -> None:
    """The launcher removes the container in the background; vfs makes that take a while."""
    deadline = time.monotonic() + within_s
    while name in images.docker("ps", "--all", "--format", "{{.Names}}").stdout.split():
        assert time.monotonic() < deadline, f"container {name} was not removed"
        time.sleep(2)


# Where the stand-in base's pip put the framework (NGC's images: the system Python's site-packages).
SYSTEM_SITE = "/usr/local/lib/python3"


def stack_state(image: str, stack: str) -> dict:
    """Inside the image: the stack registered (so `tbdkit bench` there, as under compose, runs
    natively) and the framework imported from the base's site-packages."""
    probe = ("import json, importlib; from tbdkit.env import stacks; s = stacks.get('%s'); "
             "m = importlib.import_module(s.module); "
             "print(json.dumps({'installed': stacks.is_installed(s.name), 'file': m.__file__}))") % stack
    proc = images.docker("run", "--rm", "--network", "none", image, "python", "-c", probe, timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def only_run(results: Path) -> Path:
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    return run


def test_bench_in_a_container(ci_image, user_kit, results):
    # launched on one core of a machine with more, the container runs on that core alone (--cpuset-cpus)
    mask, machine = cpus.affinity(), cpus.online()
    launched_on = mask[:1] if len(machine) > 1 else None
    t0 = time.monotonic()
    proc = bench_as_user(user_kit, results, TAG, cores=launched_on)
    print(f"docker bench: {time.monotonic() - t0:.1f} s")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    run = only_run(results)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] in MEASURED, summary
    assert summary["metrics"]["throughput"]["value"] > 0 and summary["device"] == "cpu"
    env = json.loads((run / "env.json").read_text())
    container = env["container"]
    assert container["image"] == TAG and container["launcher"] == "docker"
    assert container["image_id"] == ci_image["id"] and container["image_id"].startswith("sha256:")
    assert container["image_digest"] is None and "content digest" in container["image_digest_note"]
    assert container["base_image"] == "tbdkit-ci/pytorch-base"
    assert env["host"]["in_container"] is True
    budget = env["cpu_budget"]
    assert budget["affinity"] == (launched_on or machine) and budget["intra_op"] == 1, budget
    assert env["framework"]["framework_version"].startswith("2.13.0")
    # the base's own framework build, not one the image installed over it (NGC's torch stays)
    build = env["framework_build"]
    assert build["version"] == "2.13.0+cpu" and build["file"].startswith(SYSTEM_SITE), build
    assert env["tools"]["ncu"] == {"path": None, "version": None, "required": "yes"}
    assert env["kit"]["git"]["source"] == "launcher" and env["kit"]["git"]["commit"]
    uid = os.getuid() and os.getuid() or UID  # the invoking user: 4242 when the test runs as root
    for path in run.iterdir():
        st = path.stat()
        assert (st.st_uid, path.name) == (uid, path.name)
    log = (run / "log.txt").read_text()
    assert "$ " in log and "--network none" in log
    assert "--cap-drop ALL" in log and "--security-opt no-new-privileges" in log and "SYS_ADMIN" not in log
    assert (f"--cpuset-cpus {cpus.cpu_list(launched_on)}" in log) if launched_on else ("--cpuset-cpus" not in log)
    assert not (run / "container.log").exists()
    assert_removed(f"tbdkit-{run.name}")


def test_a_crashing_container_leaves_its_log_and_a_failed_summary(ci_image, user_kit, results):
    # The same image, its Deep Speech 2 module replaced by one that aborts the interpreter.
    dockerfile = f"FROM {TAG}\nRUN printf 'import os\\nos.abort()\\n' > /opt/tbdkit/src/workloads/deepspeech2/pytorch.py\n"
    build = subprocess.run([images.docker_binary(), "build", "--tag", CRASH_TAG, "-"], input=dockerfile,
                           capture_output=True, text=True, timeout=600, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    assert build.returncode == 0, build.stderr
    proc = bench_as_user(user_kit, results, CRASH_TAG)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out
    run = only_run(results)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "exited with code 134" in summary["error"] and "container.log" in summary["error"]
    assert summary["container"]["exit_code"] == 134
    state = json.loads((run / "container.json").read_text())
    assert state["exit_code"] == 134 and state["oom_killed"] is False
    log = (run / "container.log").read_text()
    assert "setup" in log  # the agent's own log lines, as the container printed them
    assert_removed(f"tbdkit-{run.name}")


def test_a_base_is_imported_once_per_tarball(ci_image):
    """make-base.sh imports its cached tarball under a tag once: run again, the image keeps its id (so
    Docker's build cache serves the stand-in built on it and the stack's layers below the kit's own)."""
    tag = "tbdkit-ci/import-probe"
    try:
        runs, ids = [], []
        for _ in range(2):
            runs.append(subprocess.run(["bash", str(ROOT / "docker/ci/make-base.sh"), tag], capture_output=True,
                                       text=True, timeout=600))
            assert runs[-1].returncode == 0, runs[-1].stderr[-2000:]
            ids.append((images.inspect_image(tag) or {}).get("id"))
        assert "imported " + tag in runs[0].stdout and "already holds" in runs[1].stdout, [r.stdout for r in runs]
        assert ids[0] and ids[0].startswith("sha256:") and ids[1] == ids[0], ids
    finally:
        images.docker("rmi", tag, check=False)


# The other stacks' own Dockerfiles, built on a CPU stand-in for their NGC bases
# (docker/ci/framework-base.Dockerfile: the framework wheel from pyproject's extra in the system
# Python, as NGC holds it), then the same Deep Speech 2 bench in a container. MXNet's stand-in is
# Ubuntu 22.04 with Python 3.10 and no venv module, as NGC's MXNet image is: there the agent trains
# on Python 3.10, from an environment installed at its image lock's versions. The TensorFlow image
# (2.7 GB) is built only on overlay2: under the vfs storage driver, which copies the whole file
# system for every layer, it filled a 35 GB disk.
FRAMEWORK_VERSIONS = {"mxnet": "1.9.1", "tensorflow": "2.21.0"}
TOO_BIG_FOR_VFS = {"tensorflow"}


def storage_driver() -> str:
    return images.docker("info", "--format", "{{.Driver}}").stdout.strip()


_built: dict[str, dict] = {}


def stack_image(stack: str) -> tuple[str, dict]:
    """The stack's CI image, built once per test module."""
    tag = f"tbdkit-ci/{stack}:cpu"
    if stack not in _built:
        t0 = time.monotonic()
        proc = subprocess.run(["bash", str(ROOT / "docker/ci/build-ci-image.sh"), tag, stack], capture_output=True,
                              text=True, cwd=ROOT, env={**os.environ, "PYTHON": sys.executable}, timeout=1800)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        built = images.inspect_image(tag)
        assert built is not None
        print(f"CI image {tag}: built in {time.monotonic() - t0:.0f} s, {built['size_bytes'] / 2**20:.0f} MiB")
        _built[stack] = built
    return tag, _built[stack]


@pytest.mark.parametrize("stack", sorted(FRAMEWORK_VERSIONS))
def test_the_other_stacks_images_build_and_bench(stack, ci_image, user_kit, results):
    if stack in TOO_BIG_FOR_VFS and storage_driver() == "vfs":
        print(f"skipping the {stack} image: dockerd runs on vfs, which copies its 2.7 GB file system per layer")
        pytest.skip(f"the {stack} image is not built under the vfs storage driver (disk)")
    tag, built = stack_image(stack)
    state = stack_state(tag, stack)
    assert state["installed"] is True and state["file"].startswith(SYSTEM_SITE), state
    t0 = time.monotonic()
    proc = bench_as_user(user_kit, results, tag, stack)
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
    assert env["framework"]["framework_version"] == FRAMEWORK_VERSIONS[stack]
    if stack == "mxnet":
        assert env["host"]["python"].startswith("3.10.") and "glibc2.35" in env["host"]["os"], env["host"]
        lock = env["lock"]
        assert lock["name"] == "mxnet-image" and lock["python"] == "3.10", lock
        assert lock["installed_from_digest"] == lock["digest"] and "note" not in lock, lock
        assert lock["differences"] == [], lock  # the stand-in's own packages are the lock's versions too
    uid = os.getuid() and os.getuid() or UID
    assert {path.stat().st_uid for path in run.iterdir()} == {uid}
    assert_removed(f"tbdkit-{run.name}")


# Every module of the kit, and every MXNet workload file, imported by the Python 3.10 of the MXNet
# image (Ubuntu 22.04's, as in NGC's MXNet image). Only the other frameworks' adapters may fail, and
# only because their framework is not in this image.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
import tbdkit
from tbdkit.spec import catalog
failed = {}
names = [m.name for m in pkgutil.walk_packages(tbdkit.__path__, "tbdkit.") if not m.name.endswith("__main__")]
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = [type(exc).__name__, getattr(exc, "name", None)]
workloads = []
for model in catalog.models().values():
    for part in ("data", "mxnet"):
        if (model.folder / (part + ".py")).is_file():
            try:
                catalog.load_module(model, part)
                workloads.append(model.name + "/" + part)
            except Exception as exc:
                failed[model.name + "/" + part] = [type(exc).__name__, str(exc)]
print(json.dumps({"python": sys.version.split()[0], "modules": names, "workloads": workloads, "failed": failed}))
"""
OTHER_FRAMEWORKS = {"torch", "keras", "tensorflow"}


def test_every_kit_module_and_mxnet_workload_imports_on_python_3_10(ci_image):
    tag, _ = stack_image("mxnet")
    proc = images.docker("run", "--rm", "--network", "none", tag, "python", "-c", IMPORT_ALL, timeout=600)
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["python"].startswith("3.10."), found["python"]
    assert len(found["modules"]) > 100 and "tbdkit.agent.run" in found["modules"], found["modules"]
    assert len(found["workloads"]) >= 2 * 10 and "deepspeech2/mxnet" in found["workloads"], found["workloads"]
    unexpected = {name: why for name, why in found["failed"].items()
                  if not (why[0] == "ModuleNotFoundError" and why[1] in OTHER_FRAMEWORKS)}
    assert unexpected == {}, unexpected
    # only the adapters and describers of PyTorch and TensorFlow (pytorch*, tensorflow*), and nothing else
    assert all(name.rsplit(".", 1)[-1].split("_")[0] in {"pytorch", "tensorflow"}
               for name in found["failed"]), found["failed"]
    print(f"Python {found['python']}: {len(found['modules']) - len(found['failed'])} of {len(found['modules'])} "
          f"kit modules and {len(found['workloads'])} workload files imported")
