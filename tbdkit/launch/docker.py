"""The docker launcher: the agent runs inside the stack's pinned image.

The container's command, mounts and devices are built from the RunSpec as an argument list
(never text split into lines: an image label holding a newline stays one argument) and run with
the docker CLI (see tbdkit/env/images.py for why the CLI and not the SDK). The container runs as the
invoking user (under sudo, the user who called sudo; as plain root, a fixed unprivileged uid
that is given the run directory), with every capability dropped and no privilege gain; only the
run directory is mounted read-write, a real dataset read-only; the network is off. The agent's
stdout carries the progress events as in the native launcher, its stderr goes to log.txt. When
the container fails, its `docker logs` and `docker inspect` state are kept in the run directory
before it is removed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tbdkit.core.errors import UserError
from tbdkit.env import cpus, images, oci, stacks
from tbdkit.launch.base import Busy, EventHandler, quiet, stream
from tbdkit.results import files as runfiles
from tbdkit.results import summary as summaries
from tbdkit.results.rundir import RunDir
from tbdkit.spec import catalog
from tbdkit.spec.run_spec import RunSpec

CONTAINER_RUN_DIR = "/tbdkit/run"
CONTAINER_DATA_DIR = "/tbdkit/data"
CONTAINER_WORKLOADS_DIR = "/tbdkit/workloads-outside"  # a model from outside the kit, read-only (tbdkit.spec.catalog)
CONTAINER_SPEC = runfiles.CONTAINER_SPEC
SHM_SIZE = "8g"
# The container's user when the launcher runs as root without sudo: no account on the host or
# in the image, owns nothing but the run directory it is given.
UNPRIVILEGED_UID = 65532


def gpu_args(device: str, access: images.GpuAccess) -> list[str]:
    """The GPU arguments for the spec's device: none for the CPU; every GPU for auto when the
    containers can reach them (the agent then picks cuda:0, as natively); a cuda device needs them."""
    if device == "cpu" or (device == "auto" and not access.ok):
        return []
    if not access.ok:
        raise UserError(
            f"The run asks for device {device} but Docker has no NVIDIA runtime ({access.detail}): "
            f"{images.GPU_FIX}, pass --device cpu, {images.NATIVE_HINT}."
        )
    return access.run_args()


def cpuset_args(mask: list[int], machine: list[int], is_local: Callable[[], bool]) -> list[str]:
    """`--cpuset-cpus` with the launcher's own cores where they are fewer than the machine's (taskset, Slurm's
    binding, numactl): the container started by the daemon would otherwise run on every core. None for a
    daemon on another machine (DOCKER_HOST tcp:// or ssh://), whose cores these numbers do not name; the
    daemon is asked (`is_local`) only when the mask is narrower."""
    if not set(machine) - set(mask) or not is_local():
        return []
    return ["--cpuset-cpus", cpus.cpu_list(mask)]


def container_user(uid: int | None = None, gid: int | None = None) -> tuple[int, int]:
    """Who the container runs as: the invoking user; under sudo the user behind it (SUDO_UID);
    as plain root a fixed unprivileged uid. Never root."""
    if uid is not None:
        return uid, uid if gid is None else gid
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    sudo_uid, sudo_gid = os.environ.get("SUDO_UID", ""), os.environ.get("SUDO_GID", "")
    if sudo_uid.isdigit() and int(sudo_uid) != 0:
        return int(sudo_uid), int(sudo_gid) if sudo_gid.isdigit() else int(sudo_uid)
    return UNPRIVILEGED_UID, UNPRIVILEGED_UID


def hand_over(run_dir: Path, uid: int, gid: int) -> None:
    """Give the run directory and what is in it to the container's user (root launching only)."""
    if os.geteuid() != 0:
        return
    for path in [run_dir, *run_dir.rglob("*")]:
        os.chown(path, uid, gid, follow_symlinks=False)


def container_spec(spec: RunSpec) -> dict[str, Any]:
    """The spec as the agent sees it inside the container: a real dataset lives at CONTAINER_DATA_DIR."""
    data = spec.model_dump()
    if spec.data != "synthetic":
        data["data"] = CONTAINER_DATA_DIR
    return data


def _mount_path(path: str) -> str:
    if "\n" in path or ":" in path:
        raise UserError(
            f"The path {path!r} holds a newline or a colon, which a Docker volume cannot "
            "mount: move it to a plain path, or use LAUNCHER=native."
        )
    return path


def render(
    spec: RunSpec,
    run_dir: Path,
    image: dict[str, Any],
    access: images.GpuAccess,
    *,
    uid: int | None = None,
    gid: int | None = None,
    cpuset: list[str] | None = None,
) -> list[str]:
    """The docker CLI arguments (after `docker`) that run this spec's agent in `image`; `cpuset`: cpuset_args's."""
    labels = images.checked_labels(image)
    image_id = oci.validate_digest(str(image["id"]), "image ID")
    oci.validate_image_reference(str(image["ref"]))
    env = {
        "HOME": "/tmp",
        "TBDKIT_LAUNCHER": "docker",
        "TBDKIT_IMAGE": image["ref"],
        "TBDKIT_IMAGE_ID": image_id,
        "TBDKIT_IMAGE_DIGEST": ",".join(oci.validate_image_reference(d) for d in image.get("repo_digests") or []),
        "TBDKIT_BASE_IMAGE": labels["org.opencontainers.image.base.name"],
        "TBDKIT_BASE_DIGEST": labels["org.opencontainers.image.base.digest"],
    }
    if labels["org.opencontainers.image.revision"]:
        env["TBDKIT_GIT_COMMIT"] = labels["org.opencontainers.image.revision"]
    user = container_user(uid, gid)
    run_path = _mount_path(str(run_dir.resolve()))
    argv = [
        "run",
        "--name",
        f"tbdkit-{run_dir.name}",
        "--init",
        "--user",
        f"{user[0]}:{user[1]}",
        # no capabilities and no way to gain any (setuid binaries): the agent needs none
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        # the agent needs no network: synthetic data, or a dataset mounted read-only
        "--network",
        "none",
        # data loader workers share batches through /dev/shm; the host's IPC stays closed
        "--shm-size",
        SHM_SIZE,
        *gpu_args(spec.device, access),
        *(cpuset or []),
        "--volume",
        f"{run_path}:{CONTAINER_RUN_DIR}",
    ]
    if spec.data != "synthetic":
        argv += ["--volume", f"{_mount_path(str(Path(spec.data).resolve()))}:{CONTAINER_DATA_DIR}:ro"]
    model = catalog.get(spec.model)
    if model.origin != catalog.KIT:  # the image holds the kit's models; a user's own is mounted, read-only
        mount = f"{CONTAINER_WORKLOADS_DIR}/{model.name}"
        argv += ["--volume", f"{_mount_path(str(model.folder.resolve()))}:{mount}:ro"]
        env[catalog.env_of(model)] = mount
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    return argv + [
        image_id,
        "python",
        "-u",
        "-m",
        "tbdkit.agent",
        "--spec",
        f"{CONTAINER_RUN_DIR}/{CONTAINER_SPEC}",
        "--run-dir",
        CONTAINER_RUN_DIR,
    ]


def frameworks(model: catalog.Model, requested: list[str]) -> list[str]:
    """The frameworks a docker bench runs (no virtual environment needed): those asked for, or
    every one of the model's that the kit has an image for."""
    if requested == ["all"]:
        requested = list(model.frameworks)
    for fw in requested:
        catalog.check_framework(model, fw)
    chosen = requested or [fw for fw in model.frameworks if fw in stacks.STACKS]
    for fw in chosen:
        if stacks.get(fw).kit_env:
            raise UserError(
                f"The {fw} stack is the kit's own environment and has no image: run it with --launcher native."
            )
    return chosen


def preflight(framework: str, device: str) -> tuple[dict[str, Any], images.GpuAccess]:
    """Docker present, its daemon up, the stack's image built, GPUs usable if asked for: each a
    one-sentence error with the fix. Returns the image and how containers reach the GPUs."""
    images.daemon_version()
    image = images.require_image(framework)
    access = images.gpu_access()
    gpu_args(device, access)
    return image, access


class DockerLauncher:
    """The launcher (tbdkit.launch.base.Launcher) of the stack's pinned image: the image is the
    environment, so no virtual environment is needed and nothing is set up here."""

    name = "docker"

    def frameworks(self, model: catalog.Model, requested: list[str], setup: bool) -> list[str]:
        return frameworks(model, requested)

    def framework_gpus(self, framework: str) -> tuple[int | None, str | None]:
        """Not asked before the run: the container preflight finds the GPUs the containers reach."""
        return None, None

    def preflight(self, framework: str, device: str, setup: bool = False, busy: Busy = quiet) -> None:
        preflight(framework, device)

    def run(self, spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int:
        """Run the spec's container in the foreground, its events to `on_event` and everything
        else to log.txt; a container that failed leaves its record (container.json, .log)."""
        image, access = preflight(spec.framework, spec.device)
        RunDir(run_dir).write_json(CONTAINER_SPEC, container_spec(spec))
        cpuset = cpuset_args(cpus.affinity(), cpus.online(), images.daemon_is_local)
        args = render(spec, run_dir, image, access, cpuset=cpuset)
        uid, gid = container_user()
        RunDir(run_dir).log.touch()
        hand_over(run_dir, uid, gid)
        return run(args, run_dir, on_event)

    def finish(
        self, spec: RunSpec, run_dir: Path, exit_code: int, summary: dict[str, Any], by_agent: bool
    ) -> dict[str, Any]:
        """A failed container's log and state are kept (and named in the summary when the agent wrote
        none); the container is removed and the run folder handed back."""
        name = f"tbdkit-{run_dir.name}"
        if exit_code != 0:
            container = keep_container_record(run_dir, name, exit_code)
            if not by_agent:
                log = RunDir(run_dir).log
                text = log.read_text(errors="replace") if log.is_file() else ""
                error = container_error(container, exit_code, text)
                summary = summaries.record(run_dir, summary, container=container, error=error)
        remove_container(name)
        hand_over(run_dir, *container_user())
        return summary


def run(args: list[str], run_dir: Path, on_event: EventHandler) -> int:
    """Run the container of `docker args` in the foreground, its events to `on_event` and everything
    else to log.txt. Each Ctrl-C is passed to the agent as SIGINT: the first stops it at the next
    iteration, a second at once."""
    cmd = [images.docker_binary(), *args]
    name = args[args.index("--name") + 1]
    with RunDir(run_dir).log.open("a", buffering=1) as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1, start_new_session=True)

        def interrupt() -> None:  # Ctrl-C: SIGINT to the agent inside the container
            images.docker("kill", "--signal", "INT", name, check=False)

        return stream(proc, log, on_event, interrupt)


def keep_container_record(run_dir: Path, name: str, exit_code: int) -> dict[str, Any]:
    """Save the failed container's log (container.log) and state (container.json)."""
    rd = RunDir(run_dir)
    logs = images.docker("logs", name, check=False, timeout=60)
    rd.container_log.write_text(logs.stdout + logs.stderr)
    state: dict[str, Any] = {"name": name, "exit_code": exit_code}
    proc = images.docker("inspect", "--format", "{{json .State}}", name, check=False)
    if proc.returncode == 0:
        raw = json.loads(proc.stdout)
        state.update(
            {
                "exit_code": raw.get("ExitCode", exit_code),
                "oom_killed": raw.get("OOMKilled"),
                "error": raw.get("Error") or None,
                "started": raw.get("StartedAt"),
                "finished": raw.get("FinishedAt"),
            }
        )
    else:
        state["error"] = "the container was never created: " + (proc.stderr.strip() or "see log.txt")
    state["log"] = rd.container_log.name
    rd.write_json(runfiles.CONTAINER_STATE, state)
    return state


# What the daemon answers when `--cpuset-cpus` names cores outside its own cgroup's cpuset (moby's
# verifyPlatformContainerResources), e.g. a dockerd that systemd's AllowedCPUs confines.
CPUSET_REFUSED = "Requested CPUs are not available"


def container_error(container: dict[str, Any], exit_code: int, log: str = "") -> str:
    """The run's error when the agent wrote none: one sentence, the fix where the user has one; `log`: log.txt's text."""
    refused = next((line.strip() for line in log.splitlines() if CPUSET_REFUSED in line), None)
    if refused:
        return (
            f"Docker may not run the container on the cores this launcher runs on ({refused}): launch on cores "
            "the Docker daemon may use (taskset -c LIST), or use --launcher native"
        )
    if container.get("oom_killed"):
        return (
            "the container was killed for memory (OOMKilled) before the agent wrote its results: "
            "try a smaller batch; see container.log"
        )
    if exit_code == 125 or str(container.get("error", "")).startswith("the container was never created"):
        return f"docker could not start the container (exit {exit_code}); see log.txt and container.json"
    return (
        f"the container exited with code {exit_code} before the agent wrote its results; "
        "see container.log and container.json"
    )


def remove_container(name: str) -> None:
    """Ask the daemon to remove the container, without waiting: removing a large container can
    take a minute on some storage drivers (vfs), and the run's results are already complete."""
    subprocess.Popen(
        [images.docker_binary(), "rm", "--force", name],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
