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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib  # novermin
except ModuleNotFoundError:  # Python 3.10 (the MXNet image): tomli is the same parser
    import tomli as tomllib  # type: ignore[no-redef]

import tbdkit
from tbdkit.core import atomic
from tbdkit.core.errors import UserError
from tbdkit.core.paths import KIT_ROOT

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
        raise UserError(
            f"The image lock file {path} is not valid TOML ({exc}): fix it or restore it with git."
        ) from None
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
        raise UserError(
            "Docker is not installed here: install Docker Engine (e.g. `apt-get install docker.io`) "
            f"and the NVIDIA Container Toolkit for GPUs, {NATIVE_HINT}."
        )
    return found


def explain_failure(stderr: str) -> str | None:
    """One sentence with the fix for the Docker failures a user can cause, or None."""
    text = stderr.lower()
    if "cannot connect to the docker daemon" in text or "is the docker daemon running" in text:
        return (
            "The Docker daemon is not running: start it (`sudo systemctl start docker`, or `dockerd &` as root), "
            f"{NATIVE_HINT}."
        )
    if "permission denied" in text and "docker.sock" in text:
        return (
            "You may not use the Docker daemon: add yourself to the docker group "
            f"(`sudo usermod -aG docker $USER`, then log in again), {NATIVE_HINT}."
        )
    if "could not select device driver" in text and "gpu" in text:
        return (
            "Docker has no NVIDIA runtime for --gpus: install the NVIDIA Container Toolkit and run "
            f"`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`, "
            f"pass --device cpu, {NATIVE_HINT}."
        )
    return None


def docker(*args: str, check: bool = True, timeout: float | None = 60) -> subprocess.CompletedProcess[str]:
    """Run one docker command; a failure a user can fix becomes a UserError saying how."""
    try:
        proc = subprocess.run([docker_binary(), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise UserError(
            f"`docker {' '.join(args[:2])}` did not answer in {timeout:.0f} s: check the Docker daemon "
            f"(`docker info`), {NATIVE_HINT}."
        ) from None
    if check and proc.returncode != 0:
        raise UserError(
            explain_failure(proc.stderr)
            or f"`docker {' '.join(args)}` failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}."
        )
    return proc


def daemon_version() -> str:
    """The server's version; raises the UserError for a missing Docker or a daemon that is down."""
    return docker("version", "--format", "{{.Server.Version}}").stdout.strip()


def daemon_endpoint() -> str | None:
    """Where the docker CLI reaches its daemon: DOCKER_HOST, else the current context's endpoint (None
    where the CLI cannot say: a CLI older than contexts talks to the local socket)."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    proc = docker("context", "inspect", "--format", "{{.Endpoints.docker.Host}}", check=False)
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def daemon_is_local() -> bool:
    """The daemon runs on this machine's kernel (a unix socket), so a container's CPU numbers are this
    process's; over tcp:// or ssh:// they are another machine's."""
    endpoint = daemon_endpoint()
    return endpoint is None or endpoint.startswith("unix://")


NVIDIA_HOOK = "nvidia-container-runtime-hook"
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
CDI_GPUS = "nvidia.com/gpu=all"
GPU_FIX = (
    "install the NVIDIA Container Toolkit and run `sudo nvidia-ctk runtime configure --runtime=docker`, "
    "then restart Docker"
)


@dataclass(frozen=True)
class GpuAccess:
    """How a container gets the GPUs, decided once for the launcher and `tbdkit doctor`.

    As Docker's daemon does it (moby daemon/nvidia_linux.go): `--gpus` works only when the daemon
    found NVIDIA's prestart hook (nvidia-container-runtime-hook) on its PATH; a registered `nvidia`
    runtime works without it through `--runtime nvidia` and NVIDIA_VISIBLE_DEVICES; a CDI spec
    for nvidia.com/gpu works through `--device nvidia.com/gpu=all` when the daemon has CDI on."""

    mode: str | None  # "gpus", "runtime", "cdi"; None: no way to the GPUs
    detail: str

    @property
    def ok(self) -> bool:
        return self.mode is not None

    def run_args(self) -> list[str]:
        """The `docker run` arguments that hand the container every GPU."""
        return {
            "gpus": ["--gpus", "all"],
            "runtime": [
                "--runtime",
                "nvidia",
                "--env",
                "NVIDIA_VISIBLE_DEVICES=all",
                "--env",
                "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
            ],
            "cdi": ["--device", CDI_GPUS],
        }.get(self.mode or "", [])


def cdi_nvidia_specs(dirs: tuple[Path, ...] | None = None) -> list[str]:
    """CDI spec files that declare NVIDIA GPUs (nvidia-ctk cdi generate writes them)."""
    found = []
    for d in CDI_DIRS if dirs is None else dirs:
        for path in sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")) + sorted(d.glob("*.json")):
            try:
                if "nvidia.com/gpu" in path.read_text(errors="replace"):
                    found.append(str(path))
            except OSError:
                continue
    return found


def gpu_access() -> GpuAccess:
    """The one decision of how (and whether) containers reach the GPUs; `docker info` answers
    for the runtimes and CDI, this machine's PATH for the hook (the daemon runs here)."""
    proc = docker("info", "--format", "{{json .Runtimes}}", check=False)
    runtimes = sorted(_json_or_none(proc.stdout) or {}) if proc.returncode == 0 else []
    # CDISpecDirs is in `docker info` from Docker 25 on; older daemons reject the field (no CDI)
    cdi = docker("info", "--format", "{{json .CDISpecDirs}}", check=False)
    found_dirs = _json_or_none(cdi.stdout) if cdi.returncode == 0 else None
    cdi_dirs = found_dirs if isinstance(found_dirs, list) else []
    hook = shutil.which(NVIDIA_HOOK)
    if hook:
        return GpuAccess("gpus", f"{hook} present: docker run --gpus all")
    if "nvidia" in runtimes:
        return GpuAccess("runtime", f"Docker runtimes: {', '.join(runtimes)}: docker run --runtime nvidia")
    specs = cdi_nvidia_specs()
    if specs and cdi_dirs:
        return GpuAccess("cdi", f"CDI spec for nvidia.com/gpu ({', '.join(specs)}): docker run --device {CDI_GPUS}")
    if specs:
        return GpuAccess(
            None,
            f"CDI spec for nvidia.com/gpu ({', '.join(specs)}) but Docker's CDI support is off "
            '(add `"features": {"cdi": true}` to /etc/docker/daemon.json, Docker 25+)',
        )
    seen = (
        f"Docker runtimes: {', '.join(runtimes)}"
        if runtimes
        else ("docker info failed" if proc.returncode != 0 else "Docker lists no runtimes")
    )
    return GpuAccess(None, f"{seen}; no {NVIDIA_HOOK}, nvidia runtime or CDI spec for nvidia.com/gpu")


def _json_or_none(text: str) -> Any:
    try:
        parsed = json.loads(text or "null")
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, (dict, list)) else None


IMAGE_LABELS = (
    "org.opencontainers.image.base.name",
    "org.opencontainers.image.base.digest",
    "org.opencontainers.image.revision",
)


def _validate_revision(value: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{4,64}", value):
        raise UserError(f"{value!r} is not a git commit")
    return value


def checked_labels(image: dict[str, Any]) -> dict[str, str]:
    """The image's labels that the launcher passes into the run, each checked for its form (a
    label is anyone's text: a newline there must not become a `docker run` flag)."""
    from tbdkit.env import oci

    labels = image.get("labels") or {}
    out = {key: str(labels.get(key) or "") for key in IMAGE_LABELS}
    bad = f"The image {image.get('ref')} carries a malformed label {{key}}={{value!r}}: rebuild it with `tbdkit images build`."
    checks: dict[str, Callable[[str], str]] = {
        "org.opencontainers.image.base.name": oci.validate_image_reference,
        "org.opencontainers.image.base.digest": oci.validate_digest,
        "org.opencontainers.image.revision": _validate_revision,
    }
    for key, check in checks.items():
        if out[key]:
            try:
                check(out[key])
            except UserError:
                raise UserError(bad.format(key=key, value=out[key])) from None
    return out


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
        raise UserError(
            f"The image {ref} is not built here: run `tbdkit images build {stack}` (or `make images`), {NATIVE_HINT}."
        )
    return found


# ---------------------------------------------------------------- build and lock


def build_command(
    spec: ImageSpec,
    tag: str,
    base: str | None = None,
    build_args: dict[str, str] | None = None,
    commit: str | None = None,
) -> list[str]:
    """The `docker build` argv for one image (the repo root is the build context)."""
    base = base or spec.pinned_base
    digest = base.split("@", 1)[1] if "@" in base else ""
    args = {"BASE_IMAGE": base, "BASE_DIGEST": digest, **(build_args or {})}
    cmd = [
        "build",
        "--file",
        str(KIT_ROOT / spec.dockerfile),
        "--tag",
        tag,
        "--label",
        f"org.opencontainers.image.revision={commit or ''}",
    ]
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


def build(
    name: str,
    tag: str | None = None,
    base: str | None = None,
    build_args: dict[str, str] | None = None,
    log: Path | None = None,
) -> dict[str, Any]:
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
        raise UserError(
            f"Building {tag} failed (exit {proc.returncode}; its log is {log}, ending: {tail[0]}): "
            "fix what the log reports and build again."
        )
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
        raise UserError(f'{path} has no digest line under [{name}]: add `digest = ""` there and lock again.')
    atomic.write_text(path, new)


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
    access = gpu_access()
    row("NVIDIA container runtime", access.ok, access.detail, GPU_FIX)
    for name in load_lock():
        ref = image_ref(name)
        found = inspect_image(ref)
        row(
            f"image {name}",
            found is not None,
            f"{ref} {found['id'][:19]}" if found else f"{ref} not built",
            f"tbdkit images build {name}",
        )
    return rows
