"""The framework images: docker/images.lock, building and locking them, and the Docker checks
every containerized run needs first.

The kit drives Docker through its CLI, not the Docker SDK for Python: the CLI is what a user on a
rented VM already has and can read, every command the kit runs is printed into the run's log in a
form that can be pasted back into a shell, `docker build` picks BuildKit or the classic builder
like the user's own builds do, and the kit gains no dependency that must match the daemon's API.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tbdkit
from tbdkit.errors import UserError
from tbdkit.paths import KIT_ROOT

NATIVE_HINT = "or run natively with LAUNCHER=native (--launcher native)"


def lock_path() -> Path:
    return Path(os.environ.get("TBDKIT_IMAGES_LOCK", KIT_ROOT / "docker" / "images.lock"))


@dataclass(frozen=True)
class ImageSpec:
    """One stack's entry of docker/images.lock."""

    name: str
    dockerfile: str
    base: str
    digest: str
    fields: dict[str, Any]

    @property
    def stack(self) -> str:
        """The framework stack the image runs (pytorch-cu12 runs pytorch)."""
        return self.name.split("-", 1)[0]

    @property
    def pinned_base(self) -> str:
        """The base by tag and digest, or by tag alone while the digest is unresolved."""
        return f"{self.base}@{self.digest}" if self.digest else self.base


def load_lock(path: Path | None = None) -> dict[str, ImageSpec]:
    path = path or lock_path()
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"The image lock file {path} is missing: restore it from the kit's repository.") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"The image lock file {path} is not valid TOML ({exc}): fix it or restore it with git.") from None
    return {name: ImageSpec(name, e["dockerfile"], e["base"], e.get("digest", ""), e) for name, e in data.items()}


def get_spec(name: str) -> ImageSpec:
    specs = load_lock()
    if name not in specs:
        raise UserError(f"There is no image '{name}' in {lock_path()}: choose one of {', '.join(specs)}.")
    return specs[name]


def image_ref(stack: str) -> str:
    """The image a docker run of `stack` uses: TBDKIT_IMAGE_<STACK> if set, else the kit's tag."""
    override = os.environ.get(f"TBDKIT_IMAGE_{stack.upper().replace('-', '_')}")
    return override or f"tbdkit/{stack}:{tbdkit.__version__}"


# ---------------------------------------------------------------- the docker CLI

def docker_binary() -> str:
    found = shutil.which(os.environ.get("TBDKIT_DOCKER", "docker"))
    if not found:
        raise UserError("Docker is not installed here: install Docker Engine (e.g. `apt-get install docker.io`) "
                        f"and the NVIDIA Container Toolkit for GPUs, {NATIVE_HINT}.")
    return found


def explain_failure(stderr: str) -> str | None:
    """One sentence with the fix for the Docker failures a user can cause, or None."""
    text = stderr.lower()
    if "cannot connect to the docker daemon" in text or "is the docker daemon running" in text:
        return ("The Docker daemon is not running: start it (`sudo systemctl start docker`, or `dockerd &` as root), "
                f"{NATIVE_HINT}.")
    if "permission denied" in text and "docker.sock" in text:
        return ("You may not use the Docker daemon: add yourself to the docker group "
                f"(`sudo usermod -aG docker $USER`, then log in again), {NATIVE_HINT}.")
    if "could not select device driver" in text and "gpu" in text:
        return ("Docker has no NVIDIA runtime for --gpus: install the NVIDIA Container Toolkit and run "
                f"`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`, "
                f"pass --device cpu, {NATIVE_HINT}.")
    return None


def docker(*args: str, check: bool = True, timeout: float | None = 60) -> subprocess.CompletedProcess[str]:
    """Run one docker command; a failure a user can fix becomes a UserError saying how."""
    try:
        proc = subprocess.run([docker_binary(), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise UserError(f"`docker {' '.join(args[:2])}` did not answer in {timeout:.0f} s: check the Docker daemon "
                        f"(`docker info`), {NATIVE_HINT}.") from None
    if check and proc.returncode != 0:
        raise UserError(explain_failure(proc.stderr) or
                        f"`docker {' '.join(args)}` failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}.")
    return proc


def daemon_version() -> str:
    """The server's version; raises the UserError for a missing Docker or a daemon that is down."""
    return docker("version", "--format", "{{.Server.Version}}").stdout.strip()


def has_nvidia_runtime() -> bool:
    """Whether `--gpus` can work: the daemon knows the nvidia runtime (NVIDIA Container Toolkit)."""
    proc = docker("info", "--format", "{{json .Runtimes}}", check=False)
    return proc.returncode == 0 and "nvidia" in proc.stdout


def inspect_image(ref: str) -> dict[str, Any] | None:
    """The local image's ID, repo digests and labels, or None when it is not here."""
    proc = docker("image", "inspect", ref, check=False)
    if proc.returncode != 0:
        if explain_failure(proc.stderr):
            raise UserError(explain_failure(proc.stderr) or "")
        return None
    data = json.loads(proc.stdout)[0]
    return {
        "ref": ref,
        "id": data["Id"],
        "repo_digests": data.get("RepoDigests") or [],
        "labels": (data.get("Config") or {}).get("Labels") or {},
        "size_bytes": data.get("Size"),
        "created": data.get("Created"),
    }


def require_image(stack: str) -> dict[str, Any]:
    ref = image_ref(stack)
    found = inspect_image(ref)
    if found is None:
        raise UserError(f"The image {ref} is not built here: run `tbdkit images build {stack}` (or `make images`), "
                        f"{NATIVE_HINT}.")
    return found


# ---------------------------------------------------------------- build and lock

def build_command(spec: ImageSpec, tag: str, base: str | None = None,
                  build_args: dict[str, str] | None = None, commit: str | None = None) -> list[str]:
    """The `docker build` argv for one image (the repo root is the build context)."""
    base = base or spec.pinned_base
    digest = base.split("@", 1)[1] if "@" in base else ""
    args = {"BASE_IMAGE": base, "BASE_DIGEST": digest, **(build_args or {})}
    cmd = ["build", "--file", str(KIT_ROOT / spec.dockerfile), "--tag", tag,
           "--label", f"org.opencontainers.image.revision={commit or ''}"]
    for key, value in args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    return cmd + [str(KIT_ROOT)]


def _builder_env() -> dict[str, str]:
    """BuildKit when the buildx plugin is there, else the classic builder (Debian's docker.io)."""
    env = dict(os.environ)
    if "DOCKER_BUILDKIT" not in env:
        proc = subprocess.run([docker_binary(), "buildx", "version"], capture_output=True, text=True)
        if proc.returncode != 0:
            env["DOCKER_BUILDKIT"] = "0"
    return env


def kit_commit() -> str:
    proc = subprocess.run(["git", "-C", str(KIT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def build(name: str, tag: str | None = None, base: str | None = None,
          build_args: dict[str, str] | None = None, log: Path | None = None) -> dict[str, Any]:
    """Build one image from its Dockerfile and return what `inspect_image` says of it."""
    spec = get_spec(name)
    daemon_version()
    tag = tag or image_ref(name)
    cmd = [docker_binary(), *build_command(spec, tag, base, build_args, kit_commit())]
    log = log or Path(os.environ.get("TMPDIR", "/tmp")) / f"tbdkit-build-{name}.log"
    with log.open("w") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=_builder_env())
    if proc.returncode != 0:
        tail = log.read_text().strip().splitlines()[-1:] or [""]
        raise UserError(f"Building {tag} failed (exit {proc.returncode}; its log is {log}, ending: {tail[0]}): "
                        "fix what the log reports and build again.")
    found = inspect_image(tag)
    assert found is not None, f"docker build succeeded but {tag} is not there"
    return found


def set_digest(name: str, digest: str, path: Path | None = None) -> None:
    """Write one entry's digest into the lock file, keeping its comments and layout."""
    path = path or lock_path()
    text = path.read_text()
    section = re.compile(rf"(^\[{re.escape(name)}\]\n(?:(?!\[).*\n)*?)digest = \"[^\"]*\"", re.M)
    new, count = section.subn(lambda m: f'{m.group(1)}digest = "{digest}"', text, count=1)
    if count != 1:
        raise UserError(f"{path} has no digest line under [{name}]: add `digest = \"\"` there and lock again.")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(new)
    os.replace(tmp, path)


def lock(name: str) -> str:
    """Pull an entry's base by tag and record the digest it resolved to."""
    spec = get_spec(name)
    daemon_version()
    docker("pull", spec.base, timeout=3600)
    found = inspect_image(spec.base)
    repo = spec.base.rsplit(":", 1)[0]
    digests = [d.split("@", 1)[1] for d in (found or {}).get("repo_digests", []) if d.startswith(repo + "@")]
    if not digests:
        raise UserError(f"{spec.base} was pulled but has no repository digest: pull it again from its registry.")
    set_digest(name, digests[0])
    return digests[0]


# ---------------------------------------------------------------- doctor

def doctor_checks() -> list[dict[str, Any]]:
    """Docker, the NVIDIA runtime and each image, as rows (area, check, ok, found, fix) for `tbdkit doctor`."""
    rows: list[dict[str, Any]] = []

    def row(name: str, ok: bool | None, found: str, fix: str = "") -> None:
        rows.append({"area": "docker", "check": name, "ok": ok, "found": found, "fix": "" if ok else fix})

    try:
        row("docker CLI", True, docker_binary())
        version = daemon_version()
        row("docker daemon", True, f"server {version}")
    except UserError as exc:
        row("docker", False, "not usable", str(exc))
        return rows
    nvidia = has_nvidia_runtime()
    row("NVIDIA container runtime", nvidia, "nvidia runtime registered" if nvidia else "none",
        "install the NVIDIA Container Toolkit, then `sudo nvidia-ctk runtime configure --runtime=docker`")
    for name in load_lock():
        ref = image_ref(name)
        found = inspect_image(ref)
        row(f"image {name}", found is not None, f"{ref} {found['id'][:19]}" if found else f"{ref} not built",
            f"tbdkit images build {name}")
    return rows
