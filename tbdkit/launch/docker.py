"""The docker launcher: the agent runs inside the stack's pinned image.

The container's command, mounts and devices are rendered from the RunSpec by a Jinja2 template
(templates/docker_run.j2) and run with the docker CLI (see tbdkit/images.py for why the CLI and
not the SDK). Only the run directory is mounted, read-write, as the invoking user's uid:gid; a
real dataset is mounted read-only; the network is off. The agent's stdout carries the progress
events as in the native launcher, its stderr goes to log.txt. When the container fails, its
`docker logs` and `docker inspect` state are kept in the run directory before it is removed.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jinja2

from tbdkit import catalog, images, stacks
from tbdkit.agent import sink
from tbdkit.errors import UserError
from tbdkit.launch import EventHandler, Outcome, finalize, new_run_dir, stream
from tbdkit.spec import RunSpec

CONTAINER_RUN_DIR = "/tbdkit/run"
CONTAINER_DATA_DIR = "/tbdkit/data"
CONTAINER_SPEC = "container-spec.json"
SHM_SIZE = "8g"


@functools.cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("tbdkit", "templates"), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=False, autoescape=False)
    return env.get_template("docker_run.j2")


def gpus_flag(device: str, nvidia: bool) -> str | None:
    """`--gpus` for the spec's device: none for the CPU; all GPUs for auto when the NVIDIA runtime
    is there (the agent then picks cuda:0, as natively); a cuda device needs the runtime."""
    if device == "cpu" or (device == "auto" and not nvidia):
        return None
    if not nvidia:
        raise UserError(f"The run asks for device {device} but Docker has no NVIDIA runtime: install the NVIDIA "
                        "Container Toolkit (`sudo nvidia-ctk runtime configure --runtime=docker`), pass --device cpu, "
                        f"{images.NATIVE_HINT}.")
    return "all"


def container_spec(spec: RunSpec) -> dict[str, Any]:
    """The spec as the agent sees it inside the container: a real dataset lives at CONTAINER_DATA_DIR."""
    data = spec.model_dump()
    if spec.data != "synthetic":
        data["data"] = CONTAINER_DATA_DIR
    return data


def render(spec: RunSpec, run_dir: Path, image: dict[str, Any], nvidia: bool, *,
           uid: int | None = None, gid: int | None = None, hardware_counters: bool | None = None) -> list[str]:
    """The docker CLI arguments (after `docker`) that run this spec's agent in `image`."""
    labels = image.get("labels") or {}
    env = {
        "TBDKIT_LAUNCHER": "docker",
        "TBDKIT_IMAGE": image["ref"],
        "TBDKIT_IMAGE_ID": image["id"],
        "TBDKIT_IMAGE_DIGEST": ",".join(image.get("repo_digests") or []),
        "TBDKIT_BASE_IMAGE": labels.get("org.opencontainers.image.base.name", ""),
        "TBDKIT_BASE_DIGEST": labels.get("org.opencontainers.image.base.digest", ""),
    }
    if labels.get("org.opencontainers.image.revision"):
        env["TBDKIT_GIT_COMMIT"] = labels["org.opencontainers.image.revision"]
    if hardware_counters is None:  # a spec field for Nsight Compute runs, once the spec has one
        hardware_counters = bool(getattr(spec, "hardware_counters", False))
    values = {
        "name": f"tbdkit-{run_dir.name}",
        "uid": os.getuid() if uid is None else uid,
        "gid": os.getgid() if gid is None else gid,
        "network": "none",
        "ipc_host": False,
        "shm_size": SHM_SIZE,
        "gpus": gpus_flag(spec.device, nvidia),
        "hardware_counters": hardware_counters,
        "run_dir": str(run_dir.resolve()),
        "container_run_dir": CONTAINER_RUN_DIR,
        "data_dir": None if spec.data == "synthetic" else str(Path(spec.data).resolve()),
        "container_data_dir": CONTAINER_DATA_DIR,
        "env": env,
        "image": image["id"],  # the exact image inspected, even if the tag moves meanwhile
        "spec_file": CONTAINER_SPEC,
    }
    for key in ("run_dir", "data_dir"):
        if values[key] and ("\n" in values[key] or ":" in values[key]):
            raise UserError(f"The path {values[key]!r} holds a newline or a colon, which a Docker volume cannot "
                            "mount: move it to a plain path, or use LAUNCHER=native.")
    return [line for line in (raw.strip() for raw in _template().render(**values).splitlines()) if line]


def frameworks(model: catalog.Model, requested: list[str]) -> list[str]:
    """The frameworks a docker bench runs (no virtual environment needed): those asked for, or
    every one of the model's that the kit has an image for."""
    if requested == ["all"]:
        requested = list(model.frameworks)
    for fw in requested:
        catalog.check_framework(model, fw)
    chosen = requested or [fw for fw in model.frameworks if fw in stacks.STACKS]
    for fw in chosen:
        stacks.get(fw)
    return chosen


def preflight(framework: str, device: str) -> tuple[dict[str, Any], bool]:
    """Docker present, its daemon up, the stack's image built, GPUs usable if asked for: each a
    one-sentence error with the fix. Returns the image and whether the NVIDIA runtime is there."""
    images.daemon_version()
    image = images.require_image(framework)
    nvidia = images.has_nvidia_runtime()
    gpus_flag(device, nvidia)
    return image, nvidia


def launch(spec: RunSpec, results: Path, on_event: EventHandler) -> Outcome:
    image, nvidia = preflight(spec.framework, spec.device)
    run_dir = new_run_dir(results, spec)
    sink.write_json(run_dir / "spec.json", spec.model_dump())
    sink.write_json(run_dir / CONTAINER_SPEC, container_spec(spec))
    args = render(spec, run_dir, image, nvidia)
    exit_code = run(args, run_dir, on_event)
    had_summary = (run_dir / "summary.json").is_file()
    status, summary = finalize(run_dir, spec, exit_code)
    if exit_code != 0:
        container = keep_container_record(run_dir, f"tbdkit-{run_dir.name}", exit_code)
        if not had_summary:
            summary["container"] = container
            summary["error"] = container_error(container, exit_code)
            sink.write_json(run_dir / "summary.json", summary)
    remove_container(f"tbdkit-{run_dir.name}")
    return Outcome(run_dir, status, summary)


def run(args: list[str], run_dir: Path, on_event: EventHandler) -> int:
    """Run the container in the foreground, its events to `on_event` and everything else to
    log.txt. Each Ctrl-C is passed to the agent as SIGINT: the first stops it at the next
    iteration, a second at once."""
    cmd = [images.docker_binary(), *args]
    name = args[args.index("--name") + 1]
    with (run_dir / "log.txt").open("a", buffering=1) as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1,
                                start_new_session=True)
        return stream(proc, log, on_event, lambda: images.docker("kill", "--signal", "INT", name, check=False))


def keep_container_record(run_dir: Path, name: str, exit_code: int) -> dict[str, Any]:
    """Save the failed container's log (container.log) and state (container.json)."""
    logs = images.docker("logs", name, check=False, timeout=60)
    (run_dir / "container.log").write_text(logs.stdout + logs.stderr)
    state: dict[str, Any] = {"name": name, "exit_code": exit_code}
    proc = images.docker("inspect", "--format", "{{json .State}}", name, check=False)
    if proc.returncode == 0:
        raw = json.loads(proc.stdout)
        state.update({"exit_code": raw.get("ExitCode", exit_code), "oom_killed": raw.get("OOMKilled"),
                      "error": raw.get("Error") or None, "started": raw.get("StartedAt"),
                      "finished": raw.get("FinishedAt")})
    else:
        state["error"] = "the container was never created: " + (proc.stderr.strip() or "see log.txt")
    state["log"] = "container.log"
    sink.write_json(run_dir / "container.json", state)
    return state


def container_error(container: dict[str, Any], exit_code: int) -> str:
    if container.get("oom_killed"):
        return ("the container was killed for memory (OOMKilled) before the agent wrote its results: "
                "try a smaller batch; see container.log")
    if exit_code == 125 or str(container.get("error", "")).startswith("the container was never created"):
        return f"docker could not start the container (exit {exit_code}); see log.txt and container.json"
    return (f"the container exited with code {exit_code} before the agent wrote its results; "
            "see container.log and container.json")


def remove_container(name: str) -> None:
    """Ask the daemon to remove the container, without waiting: removing a large container can
    take a minute on some storage drivers (vfs), and the run's results are already complete."""
    subprocess.Popen([images.docker_binary(), "rm", "--force", name], stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)
