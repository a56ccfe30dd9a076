"""The docker launcher without a daemon: the rendered `docker run`, the lock file, and every
error a user can cause (no Docker, daemon down, image not built, no NVIDIA runtime), each one
sentence with the fix, driven through the CLI against a fake `docker` on PATH."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tbdkit.env import cpus, images
from tbdkit.spec import run_spec as spec
from tbdkit.core.errors import UserError
from tbdkit.launch import docker as dl

ROOT = Path(__file__).resolve().parents[1]
IMAGE = {"ref": "tbdkit/pytorch:0.1.0", "id": "sha256:" + "ab" * 32, "repo_digests": [],
         "labels": {"org.opencontainers.image.base.name": "nvcr.io/nvidia/pytorch:25.12-py3",
                    "org.opencontainers.image.revision": "c0ffee"}}


HOOK = images.GpuAccess("gpus", "hook present")
NO_GPU = images.GpuAccess(None, "nothing")


def make_spec(**kw):
    return spec.build(**{"model": "deepspeech2", "batch_size": 2, "launcher": "docker", **kw})


def flag(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == name]


def test_render_cpu_run(tmp_path):
    argv = dl.render(make_spec(device="cpu"), tmp_path / "run1", IMAGE, HOOK, uid=1234, gid=99)
    assert argv[0] == "run" and "--init" in argv
    assert flag(argv, "--user") == ["1234:99"]
    assert flag(argv, "--cap-drop") == ["ALL"] and flag(argv, "--security-opt") == ["no-new-privileges"]
    assert "--ipc" not in argv
    assert flag(argv, "--network") == ["none"]
    assert flag(argv, "--shm-size") == [dl.SHM_SIZE]
    assert "--gpus" not in argv and "--cap-add" not in argv and "--rm" not in argv
    assert flag(argv, "--volume") == [f"{(tmp_path / 'run1').resolve()}:{dl.CONTAINER_RUN_DIR}"]
    env = dict(e.split("=", 1) for e in flag(argv, "--env"))
    assert env["TBDKIT_IMAGE_ID"] == IMAGE["id"] and env["TBDKIT_IMAGE"] == IMAGE["ref"]
    assert env["TBDKIT_GIT_COMMIT"] == "c0ffee" and env["HOME"] == "/tmp"
    assert env["TBDKIT_BASE_IMAGE"] == "nvcr.io/nvidia/pytorch:25.12-py3"
    # the image runs by ID, the agent reads the container's copy of the spec
    i = argv.index(IMAGE["id"])
    assert argv[i + 1:] == ["python", "-u", "-m", "tbdkit.agent", "--spec",
                            f"{dl.CONTAINER_RUN_DIR}/{dl.CONTAINER_SPEC}", "--run-dir", dl.CONTAINER_RUN_DIR]
    assert flag(argv, "--name") == ["tbdkit-run1"]


def test_render_gpu_and_data(tmp_path):
    data = tmp_path / "LibriSpeech"
    data.mkdir()
    s = make_spec(device="cuda", data=str(data))
    argv = dl.render(s, tmp_path / "r", IMAGE, HOOK)
    assert flag(argv, "--gpus") == ["all"]
    # no capability comes back: the docker launcher runs no Nsight Compute pass
    assert "--cap-add" not in argv and "--privileged" not in argv
    assert f"{data}:{dl.CONTAINER_DATA_DIR}:ro" in flag(argv, "--volume")
    assert dl.container_spec(s)["data"] == dl.CONTAINER_DATA_DIR and s.data == str(data)
    # auto: GPUs when the runtime is there, the CPU when not
    assert flag(dl.render(make_spec(), tmp_path / "a", IMAGE, HOOK), "--gpus") == ["all"]
    assert "--gpus" not in dl.render(make_spec(), tmp_path / "b", IMAGE, NO_GPU)


def test_cpu_lists_read_and_write_the_kernels_form(tmp_path):
    assert cpus.parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert cpus.cpu_list([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11" and cpus.cpu_list([5]) == "5"
    online = tmp_path / "online"
    online.write_text("0-1,4\n")
    assert cpus.online(online) == [0, 1, 4]
    assert cpus.online(tmp_path / "none") == list(range(os.cpu_count() or 1))
    assert set(cpus.affinity()) <= set(cpus.online())  # this machine's


@pytest.mark.parametrize("mask, local, expected", [
    ([2, 3], True, ["--cpuset-cpus", "2-3"]),  # taskset -c 2,3: the container too
    ([0, 1, 2, 3], True, []),  # every core: nothing to confine
    ([2, 3], False, []),  # a daemon on another machine: these numbers name none of its cores
])
def test_the_container_runs_on_the_launchers_cores(tmp_path, mask, local, expected):
    asked: list[bool] = []
    args = dl.cpuset_args(mask, [0, 1, 2, 3], lambda: asked.append(local) or local)
    assert args == expected
    assert asked == ([local] if len(mask) < 4 else [])  # the daemon is asked only for a narrower mask
    argv = dl.render(make_spec(device="cpu"), tmp_path / "r", IMAGE, NO_GPU, cpuset=args)
    assert flag(argv, "--cpuset-cpus") == expected[1:]
    assert argv.index(IMAGE["id"]) > (argv.index("--cpuset-cpus") if expected else 0)  # an option, not the command's


@pytest.mark.skipif(shutil.which("docker") is None and not os.environ.get("CI"), reason="no docker CLI here")
def test_a_daemon_is_local_through_a_unix_socket_only(tmp_path, monkeypatch):
    """Through the real docker CLI (no daemon needed): DOCKER_HOST, else the current context's endpoint."""
    monkeypatch.delenv("TBDKIT_DOCKER", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "config"))
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert images.daemon_endpoint() == "unix:///var/run/docker.sock" and images.daemon_is_local()
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.7:2376")
    assert not images.daemon_is_local()
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/user/1000/docker.sock")  # rootless Docker: this machine
    assert images.daemon_is_local()
    monkeypatch.delenv("DOCKER_HOST")
    made = subprocess.run(["docker", "context", "create", "far", "--docker", "host=ssh://bench@far.example"],
                          capture_output=True, text=True, env={**os.environ})
    assert made.returncode == 0, made.stderr
    monkeypatch.setenv("DOCKER_CONTEXT", "far")
    assert images.daemon_endpoint() == "ssh://bench@far.example" and not images.daemon_is_local()


def test_cuda_without_nvidia_runtime_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no NVIDIA runtime.*--device cpu.*LAUNCHER=native"):
        dl.render(make_spec(device="cuda:0"), tmp_path / "r", IMAGE, NO_GPU)


def test_path_docker_cannot_mount(tmp_path):
    odd = tmp_path / "a:b"
    odd.mkdir()
    with pytest.raises(UserError, match="colon"):
        dl.render(make_spec(device="cpu", data=str(odd)), tmp_path / "r", IMAGE, NO_GPU)


@pytest.mark.parametrize("label, value", [
    ("org.opencontainers.image.base.name", "x\n--privileged\n--volume\n/:/host\n--network\nhost"),
    ("org.opencontainers.image.base.name", "x; touch PWNED"),
    ("org.opencontainers.image.base.digest", "sha256:00\n--privileged"),
    ("org.opencontainers.image.revision", "c0ffee\n--network\nhost"),
])
def test_a_label_with_newlines_is_refused_not_turned_into_flags(tmp_path, label, value):
    image = {**IMAGE, "labels": {**IMAGE["labels"], label: value}}
    with pytest.raises(UserError, match="malformed label.*tbdkit images build"):
        dl.render(make_spec(device="cpu"), tmp_path / "r", image, NO_GPU)


def test_argv_is_a_list_whatever_the_values_hold(tmp_path, monkeypatch):
    # a spec field cannot add flags either: every value is one argument
    argv = dl.render(make_spec(device="cpu"), tmp_path / "r", IMAGE, NO_GPU, uid=1, gid=1)
    assert all(a not in argv for a in ("--privileged", "host", "/:/host"))
    assert argv.count("--volume") == 1 and flag(argv, "--network") == ["none"]


@pytest.mark.parametrize("euid, sudo, expected", [
    (1000, {}, (1000, 100)),                                    # the invoking user
    (0, {"SUDO_UID": "1234", "SUDO_GID": "55"}, (1234, 55)),    # sudo: the user behind it
    (0, {}, (dl.UNPRIVILEGED_UID, dl.UNPRIVILEGED_UID)),        # plain root: never 0:0
])
def test_the_container_never_runs_as_root(tmp_path, monkeypatch, euid, sudo, expected):
    monkeypatch.setattr(dl.os, "geteuid", lambda: euid)
    monkeypatch.setattr(dl.os, "getuid", lambda: euid)
    monkeypatch.setattr(dl.os, "getgid", lambda: 100 if euid else 0)
    monkeypatch.delenv("SUDO_UID", raising=False)
    monkeypatch.delenv("SUDO_GID", raising=False)
    for key, value in sudo.items():
        monkeypatch.setenv(key, value)
    argv = dl.render(make_spec(device="cpu"), tmp_path / "r", IMAGE, NO_GPU)
    assert flag(argv, "--user") == [f"{expected[0]}:{expected[1]}"] and flag(argv, "--user") != ["0:0"]


def test_a_root_launch_hands_the_run_folder_to_the_container_user(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "spec.json").write_text("{}")
    seen = []
    monkeypatch.setattr(dl.os, "geteuid", lambda: 0)
    monkeypatch.setattr(dl.os, "chown", lambda path, uid, gid, follow_symlinks=True: seen.append((Path(path).name, uid, gid)))
    dl.hand_over(run, dl.UNPRIVILEGED_UID, dl.UNPRIVILEGED_UID)
    assert sorted(seen) == [("run", 65532, 65532), ("spec.json", 65532, 65532)]


@pytest.mark.parametrize("stderr, words", [
    ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
     ["not running", "systemctl start docker", "LAUNCHER=native"]),
    ("permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock",
     ["docker group", "usermod", "LAUNCHER=native"]),
    ('could not select device driver "" with capabilities: [[gpu]]', ["NVIDIA Container Toolkit", "nvidia-ctk"]),
])
def test_explain_failure(stderr, words):
    msg = images.explain_failure(stderr)
    assert msg and all(w in msg for w in words) and msg.count(". ") == 0


def test_explain_failure_passes_other_errors():
    assert images.explain_failure("Error: No such image: x") is None


def test_lock_file_entries_and_set_digest(tmp_path):
    specs = images.load_lock()
    assert {"pytorch", "pytorch-cu12", "tensorflow", "mxnet"} <= set(specs)
    for s in specs.values():
        assert (ROOT / s.dockerfile).is_file() and s.base.startswith("nvcr.io/nvidia/")
        # a digest is either unresolved or a real sha256, never anything else
        assert s.digest == "" or (s.digest.startswith("sha256:") and len(s.digest) == 71)
    assert specs["pytorch-cu12"].stack == "pytorch"
    lock = tmp_path / "images.lock"
    shutil.copy(images.lock_path(), lock)
    digest = "sha256:" + "0" * 64
    images.set_digest("tensorflow", digest, lock)
    again = images.load_lock(lock)
    assert again["tensorflow"].digest == digest and again["tensorflow"].pinned_base.endswith("@" + digest)
    assert again["mxnet"].digest == specs["mxnet"].digest and again["pytorch"].digest == specs["pytorch"].digest
    assert "# tbdkit's framework images" in lock.read_text()


def test_each_dockerfile_defaults_to_its_locked_base_and_mxnet_is_at_its_newest_readable_release():
    """A Dockerfile built by hand (docker build, no --build-arg) uses the base images.lock pins; a
    recorded source is NVIDIA's framework documentation."""
    specs = images.load_lock()
    for name in ("pytorch", "tensorflow", "mxnet"):  # pytorch-cu12 shares pytorch's Dockerfile
        text = (ROOT / specs[name].dockerfile).read_text()
        assert re.search(rf"^ARG BASE_IMAGE={re.escape(specs[name].base)}$", text, flags=re.M), name
    for entry in specs.values():
        if "source" in entry.fields:
            assert entry.fields["source"].startswith("https://docs.nvidia.com/deeplearning/frameworks/"), entry
    # MXNet: the newest NGC release whose notes were read (24.06: MXNet 1.9.1, CUDA 12.4.1, Python 3.10)
    mxnet = specs["mxnet"]
    assert mxnet.base == "nvcr.io/nvidia/mxnet:24.06-py3" and mxnet.fields["verified"] is True
    assert mxnet.fields["framework"].startswith("MXNet 1.9.1") and mxnet.fields["cuda"] == "12.4.1"
    assert mxnet.fields["source"].endswith("/mxnet-release-notes/rel-24-06.html")
    assert "Python 3.10" in mxnet.fields["os"]


def test_bad_lock_file_is_a_user_error(tmp_path, monkeypatch):
    bad = tmp_path / "images.lock"
    bad.write_text("[pytorch\n")
    monkeypatch.setenv("TBDKIT_IMAGES_LOCK", str(bad))
    with pytest.raises(UserError, match="not valid TOML"):
        images.load_lock()
    with pytest.raises(UserError, match="no image 'caffe'"):
        monkeypatch.setenv("TBDKIT_IMAGES_LOCK", str(images.KIT_ROOT / "docker" / "images.lock"))
        images.get_spec("caffe")


def test_build_command_pins_base_and_args():
    s = images.get_spec("pytorch")
    cmd = images.build_command(s, "t:1", base="b@sha256:" + "1" * 64, build_args={"REQUIRE_NCU": "0"}, commit="abc")
    args = dict(v.split("=", 1) for v in flag(cmd, "--build-arg"))
    assert args == {"BASE_IMAGE": "b@sha256:" + "1" * 64, "BASE_DIGEST": "sha256:" + "1" * 64, "REQUIRE_NCU": "0"}
    assert flag(cmd, "--label") == ["org.opencontainers.image.revision=abc"]
    assert flag(cmd, "--file") == [str(ROOT / "docker/pytorch.Dockerfile")] and cmd[-1] == str(ROOT)


@pytest.mark.parametrize("stack", ["pytorch", "tensorflow", "mxnet"])
def test_images_require_only_the_tools_the_kit_calls(stack):
    """The kit calls ncu, never nsys: no image refuses to build without nsys, none puts NVIDIA's
    version folders (/opt/nvidia/nsight-compute holds <version>/ncu) on PATH, and ncu is found the
    way NVIDIA lays it out (tbdkit.env.nsight, run by docker/stack-env.sh)."""
    text = (ROOT / "docker" / f"{stack}.Dockerfile").read_text()
    assert "nsys" not in text and "REQUIRE_NSIGHT" not in text and "ARG REQUIRE_NCU=1" in text
    assert "/opt/nvidia/nsight-compute" not in text.split("ENV ", 1)[1].split("\n\n", 1)[0]
    script = (ROOT / "docker" / "stack-env.sh").read_text()
    assert 'nsight.find("ncu")' in script and "REQUIRE_NCU" in script and "command -v nsys" not in script


def test_image_ref_override(monkeypatch):
    monkeypatch.delenv("TBDKIT_IMAGE_PYTORCH", raising=False)
    assert images.image_ref("pytorch") == "tbdkit/pytorch:0.1.0"
    monkeypatch.setenv("TBDKIT_IMAGE_PYTORCH", "tbdkit/pytorch-cu12:0.1.0")
    assert images.image_ref("pytorch") == "tbdkit/pytorch-cu12:0.1.0"


# ---------------------------------------------------------------- the CLI against a fake docker

FAKE = """#!/bin/sh
# A stand-in docker: answers by $FAKE_DOCKER_MODE.
case "$FAKE_DOCKER_MODE:$1" in
  down:*) echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1;;
  *:version) echo 20.10.24; exit 0;;
  noimage:image) echo "Error: No such image: $3" >&2; exit 1;;
  lock:pull) exit 0;;
  lock:image) echo '[{"Id": "sha256:2222", "RepoDigests": ["other/repo@sha256:bad", "nvcr.io/nvidia/pytorch@sha256:'"$(printf 'c%.0s' $(seq 64))"'"]}]'; exit 0;;
  *:image) echo '[{"Id": "sha256:1111", "RepoDigests": [], "Config": {"Labels": {}}}]'; exit 0;;
  *:info) echo '{"io.containerd.runc.v2":{},"runc":{}}'; exit 0;;
esac
echo "fake docker: unexpected $*" >&2; exit 3
"""


def cli(tmp_path: Path, mode: str, *args: str, docker: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(FAKE)
    fake.chmod(0o755)
    env = {**os.environ, "FAKE_DOCKER_MODE": mode, "TBDKIT_DOCKER": docker or str(fake), **(env or {})}
    env.pop("TBDKIT_IMAGE_PYTORCH", None)
    results = ["--results", str(tmp_path / "results")] if args[0] == "bench" else []
    return subprocess.run([sys.executable, "-m", "tbdkit.cli", *args, *results],
                          capture_output=True, text=True, env=env, timeout=120)


BENCH = ("bench", "--model", "deepspeech2", "--launcher", "docker", "--batch", "2")


@pytest.mark.parametrize("mode, extra, docker, words", [
    ("ok", (), "/nonexistent/docker", ["Docker is not installed", "apt-get install docker.io", "LAUNCHER=native"]),
    ("down", (), None, ["Docker daemon is not running", "LAUNCHER=native"]),
    ("noimage", (), None, ["tbdkit/pytorch:0.1.0 is not built", "tbdkit images build pytorch", "make images",
                           "LAUNCHER=native"]),
    ("ok", ("--device", "cuda"), None, ["no NVIDIA runtime", "nvidia-ctk", "LAUNCHER=native"]),
])
def test_bench_docker_errors(tmp_path, mode, extra, docker, words):
    proc = cli(tmp_path, mode, *BENCH, *extra, docker=docker)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out and all(w in " ".join(out.split()) for w in words), out
    # nothing ran: no run directory was made
    assert not (tmp_path / "results").exists() or not [p for p in (tmp_path / "results").iterdir() if p.is_dir()]


def test_images_lock_records_the_pulled_digest(tmp_path):
    lock = tmp_path / "images.lock"
    shutil.copy(images.lock_path(), lock)
    proc = cli(tmp_path, "lock", "images", "lock", "pytorch", env={"TBDKIT_IMAGES_LOCK": str(lock)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    digest = "sha256:" + "c" * 64
    assert images.load_lock(lock)["pytorch"].digest == digest and digest in proc.stdout
    assert images.load_lock(lock)["tensorflow"].digest == images.load_lock()["tensorflow"].digest


def test_images_build_arg_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "images", "build", "pytorch", "--build-arg", "NOEQUALS"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not KEY=VALUE" in proc.stderr and "Traceback" not in proc.stderr


def test_images_list_reports_docker_state(tmp_path):
    env = {**os.environ, "TBDKIT_DOCKER": "/nonexistent/docker"}
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "images", "list", "--json"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert '"ok": false' in proc.stdout and "Docker is not installed" in proc.stdout


# ---------------------------------------------------------------- lint and compose

def _tool(name: str) -> str | None:
    return shutil.which(name) or (str(Path(sys.executable).parent / name)
                                  if (Path(sys.executable).parent / name).exists() else None)


def _need(name: str) -> str:
    found = _tool(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed; .ci/run installs it")
        pytest.skip(f"{name} is not installed here (.ci/run installs it)")
    return found


@pytest.mark.parametrize("dockerfile", sorted(p.name for p in (ROOT / "docker").glob("*.Dockerfile")))
def test_dockerfiles_lint_clean(dockerfile):
    proc = subprocess.run([_need("hadolint"), str(ROOT / "docker" / dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_config_validates(tmp_path):
    env = {**os.environ, "TBDKIT_RESULTS_DIR": str(tmp_path), "TBDKIT_DATA_DIR": str(tmp_path)}
    proc = subprocess.run([_need("docker-compose"), "--file", str(ROOT / "compose.yaml"), "config"],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    for service in ("pytorch:", "pytorch-cu12:", "tensorflow:", "mxnet:"):
        assert service in proc.stdout
    assert "capabilities:" in proc.stdout and "network_mode: none" in proc.stdout
    # the host's IPC namespace stays closed: a large /dev/shm instead, and no capabilities
    assert "ipc:" not in proc.stdout and "shm_size" in proc.stdout and "no-new-privileges" in proc.stdout


def test_rendered_compose_has_no_host_ipc():
    import yaml

    from tbdkit.launch import render

    text = render.render(make_spec(), "compose", image="tbdkit/pytorch:0.1.0")
    for service in yaml.safe_load(text)["services"].values():
        assert "ipc" not in service and service["shm_size"] == "8gb"


def test_images_install_the_workloads_libraries_of_their_stack():
    """Each image's WORKLOAD_REQUIREMENTS default is its pyproject extra without the framework pins
    (the NGC base brings the framework), so a model that runs natively runs in the container too."""
    import re
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    # keras-hub: installed in the TensorFlow image on its own, without its dependencies (KERAS_HUB_REQUIREMENTS)
    framework = re.compile(r"^(torch|torchvision|tensorflow|mxnet|numpy|keras-hub)\b")
    for stack in ("pytorch", "tensorflow", "mxnet"):
        text = (ROOT / "docker" / f"{stack}.Dockerfile").read_text()
        (default,) = re.findall(r'^ARG WORKLOAD_REQUIREMENTS="([^"]*)"', text, flags=re.M)
        assert sorted(default.split()) == sorted(r for r in extras[stack] if not framework.match(r)), stack
        assert "stack-env.sh deps" in text  # which installs ${WORKLOAD_REQUIREMENTS}
        for pin in (r for r in extras[stack] if r.startswith("keras-hub")):
            assert pin in re.findall(r'^ARG KERAS_HUB_REQUIREMENTS="([^"]*)"', text, flags=re.M)[0].split(), stack
    assert "${WORKLOAD_REQUIREMENTS:-}" in (ROOT / "docker" / "stack-env.sh").read_text()
