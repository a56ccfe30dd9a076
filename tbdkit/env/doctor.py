"""What this machine has, for `tbdkit doctor`: each check a yes/no (or n/a) and, when no, the fix.

Every check is a small function returning a `Check`; `checks()` runs them all and never raises.
Subprocesses run with a timeout of a few seconds, and the NVML probe runs under a time bound,
so a wedged driver or Docker daemon cannot hang the command. No rendering here: the CLI does it.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tbdkit.core.errors import UserError
from tbdkit.core.frameworks import KNOWN_FRAMEWORKS, TITLES
from tbdkit.env import images, nsight, stacks

try:  # nvidia-ml-py; tests replace this module attribute with a fake
    import pynvml
except ImportError:  # pragma: no cover - it is a dependency, but doctor must still work without it
    pynvml = None  # type: ignore[assignment]

# Injectable for tests: the driver's module parameters and this process's status (capabilities).
PARAMS_PATH = Path("/proc/driver/nvidia/params")
PROC_STATUS = Path("/proc/self/status")
CMD_TIMEOUT_S = 5.0
NVML_TIMEOUT_S = 15.0
CAP_SYS_ADMIN = 21

NO_DRIVER_FIX = (
    "no NVIDIA driver found: on a GPU machine install the NVIDIA driver (nvidia-smi must work); "
    "without a GPU, runs use the CPU and GPU metrics are recorded as null"
)
NSIGHT_FIX = "install Nsight {what} from NVIDIA's CUDA packages (or use the kit's docker images, which include them)"


@dataclass(frozen=True)
class Check:
    area: str  # "gpu", "docker", "frameworks", "profiling"
    name: str
    ok: bool | None  # None = not applicable here
    detail: str  # what was found, or what failed: one line
    fix: str | None = None


def as_dict(checks: list[Check]) -> list[dict]:
    """The checks as plain dicts, for --json."""
    return [asdict(c) for c in checks]


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _run(cmd: list[str], timeout: float = CMD_TIMEOUT_S) -> tuple[int | None, str, str]:
    """(exit code, stdout, stderr); exit code None when it could not run or timed out."""
    try:
        proc = subprocess.run(
            cmd, check=False, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return None, "", f"`{' '.join(cmd)}` did not answer within {timeout:g} s"
    except OSError as exc:
        return None, "", f"`{cmd[0]}` could not run ({exc.strerror or exc})"
    return proc.returncode, proc.stdout, proc.stderr


# ---------------------------------------------------------------------------------------- GPU


@dataclass
class NvmlInfo:
    """What one NVML session saw. `error` is set when nvmlInit (or the import) failed."""

    error: str | None = None
    no_library: bool = False  # NVML itself (the driver's libnvidia-ml) is missing
    version: str | None = None  # NVML library version
    driver: str | None = None
    cuda_driver: str | None = None  # highest CUDA version the driver supports, "12.8"
    gpus: list[str] = field(default_factory=list)
    gpm: list[bool | None] = field(default_factory=list)  # per GPU; None = could not ask
    gpm_error: str | None = None
    device_error: str | None = None
    clocks: list[dict] = field(default_factory=list)  # per GPU: clock_state()


def clock_state(nv: Any, handle: Any) -> dict:
    """Whether a GPU's clocks are held (application clocks off their default, or the driver reports
    clocks held by a setting: nvidia-smi -ac / -lgc) and whether a non-root user may set them."""
    out: dict = {}
    for key, fn in (
        ("app_sm_mhz", lambda: nv.nvmlDeviceGetApplicationsClock(handle, nv.NVML_CLOCK_SM)),
        ("default_app_sm_mhz", lambda: nv.nvmlDeviceGetDefaultApplicationsClock(handle, nv.NVML_CLOCK_SM)),
        ("max_sm_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)),
        ("events", lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(handle)),
        (
            "restricted",
            lambda: (
                nv.nvmlDeviceGetAPIRestriction(handle, nv.NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS)
                == nv.NVML_FEATURE_ENABLED
            ),
        ),
    ):
        try:
            out[key] = fn()
        except Exception:
            out[key] = None
    held = out["events"] is not None and bool(out["events"] & 0x2)  # nvmlClocksEventReasonApplicationsClocksSetting
    off_default = (
        None
        if None in (out["app_sm_mhz"], out["default_app_sm_mhz"])
        else out["app_sm_mhz"] != out["default_app_sm_mhz"]
    )
    out["locked"] = True if held or off_default else (None if out["events"] is None and off_default is None else False)
    return out


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _exc_text(exc: BaseException) -> str:
    return _one_line(f"{type(exc).__name__}: {exc}")


def _probe_nvml_unbounded() -> NvmlInfo:
    nv = pynvml
    if nv is None:
        return NvmlInfo(error="the pynvml module (package nvidia-ml-py) is not installed")
    try:
        nv.nvmlInit()
    except Exception as exc:
        # NVMLError_LibraryNotFound / NVMLError_DriverNotLoaded: no usable driver on this machine
        kind = type(exc).__name__
        return NvmlInfo(error=_exc_text(exc), no_library=kind.endswith(("LibraryNotFound", "DriverNotLoaded")))
    info = NvmlInfo()
    try:
        for attr, getter in (("version", "nvmlSystemGetNVMLVersion"), ("driver", "nvmlSystemGetDriverVersion")):
            try:
                setattr(info, attr, str(getattr(nv, getter)()))
            except Exception:
                pass
        try:
            info.cuda_driver = _cuda_version(int(nv.nvmlSystemGetCudaDriverVersion_v2()))
        except Exception:
            pass
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            info.device_error = _exc_text(exc)
            count = 0
        for i in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
                name = nv.nvmlDeviceGetName(handle)
                info.gpus.append(name.decode() if isinstance(name, bytes) else str(name))
            except Exception as exc:
                info.gpus.append(f"GPU {i} (unreadable: {_exc_text(exc)})")
                info.gpm.append(None)
                continue
            try:
                info.gpm.append(bool(nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice))
            except Exception as exc:  # old driver or library: no GPM entry point
                info.gpm.append(None)
                info.gpm_error = _exc_text(exc)
            info.clocks.append(clock_state(nv, handle))
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
    return info


def probe_nvml(timeout: float = NVML_TIMEOUT_S) -> NvmlInfo:
    """One NVML session, bounded in time: a hung driver yields an error, not a hung doctor."""
    box: list[NvmlInfo] = []

    def target() -> None:
        try:
            box.append(_probe_nvml_unbounded())
        except BaseException as exc:  # never let the probe raise
            box.append(NvmlInfo(error=_exc_text(exc)))

    t = threading.Thread(target=target, name="tbdkit-doctor-nvml", daemon=True)
    t.start()
    t.join(timeout)
    if not box:
        return NvmlInfo(error=f"NVML did not answer within {timeout:g} s (the driver may be wedged)")
    return box[0]


def _gpu_summary(gpus: list[str]) -> str:
    counts: dict[str, int] = {}
    for g in gpus:
        counts[g] = counts.get(g, 0) + 1
    return ", ".join(f"{n} × {g}" for g, n in counts.items())


def nvml_check(info: NvmlInfo) -> Check:
    if info.error is None:
        return Check("gpu", "NVML", True, f"NVML {info.version or '(version unknown)'} loaded", None)
    if pynvml is None:
        fix = "install the Python NVML bindings into the kit's environment: pip install nvidia-ml-py"
    elif info.no_library:
        fix = "NVML ships with the NVIDIA driver: install the driver (nvidia-smi must work)"
    else:
        fix = "check that `nvidia-smi` works; if it does not, reinstall or reload the NVIDIA driver"
    return Check("gpu", "NVML", False, f"NVML not usable: {info.error}", fix)


def driver_check(info: NvmlInfo) -> Check:
    if info.driver:
        cuda = f", supports CUDA up to {info.cuda_driver}" if info.cuda_driver else ""
        return Check("gpu", "NVIDIA driver", True, f"driver {info.driver}{cuda}", None)
    if info.error is not None:
        return Check(
            "gpu",
            "NVIDIA driver",
            False,
            f"no NVIDIA driver reachable ({info.error})",
            "install the NVIDIA driver for this GPU (nvidia-smi must work)",
        )
    return Check(
        "gpu",
        "NVIDIA driver",
        False,
        "NVML loaded but did not report a driver version",
        "check that `nvidia-smi` works and shows a driver version",
    )


def gpu_check(info: NvmlInfo) -> Check:
    if info.error is not None:
        fix = (
            NO_DRIVER_FIX
            if (info.no_library or pynvml is None)
            else "check that `nvidia-smi` works; without a GPU, runs use the CPU and GPU metrics are recorded as null"
        )
        return Check("gpu", "NVIDIA GPU", False, f"no GPU visible: {info.error}", fix)
    if not info.gpus:
        why = f" ({info.device_error})" if info.device_error else ""
        return Check(
            "gpu",
            "NVIDIA GPU",
            False,
            f"the driver is loaded but NVML sees no GPU{why}",
            "check `nvidia-smi -L`; in a container pass the GPUs in (docker run --gpus all)",
        )
    drv = f", driver {info.driver}" if info.driver else ""
    cuda = f", CUDA {info.cuda_driver}" if info.cuda_driver else ""
    return Check("gpu", "NVIDIA GPU", True, f"{_gpu_summary(info.gpus)}{drv}{cuda}", None)


def gpm_check(info: NvmlInfo) -> Check:
    name = "NVML GPM metrics"
    if info.error is not None or not info.gpus:
        return Check("gpu", name, None, "no GPU: GPM metrics do not apply", None)
    fix = (
        "GPU-side utilization-by-pipe metrics (SM, tensor, DRAM activity) need a Hopper or newer GPU "
        "with a recent driver (or DCGM profiling metrics); the other GPU metrics are still recorded"
    )
    if all(s is True for s in info.gpm):
        return Check("gpu", name, True, f"supported on all {len(info.gpus)} GPU(s)", None)
    supported = [g for g, s in zip(info.gpus, info.gpm) if s]
    if not supported:
        why = f" (could not ask: {info.gpm_error})" if info.gpm_error and None in info.gpm else ""
        return Check("gpu", name, False, f"not supported on {_gpu_summary(info.gpus)}{why}", fix)
    return Check(
        "gpu", name, False, f"supported on {len(supported)} of {len(info.gpus)} GPUs ({_gpu_summary(supported)})", fix
    )


CLOCKS_MEANING = (
    "locked clocks make runs comparable with each other (no boost that moves with temperature and "
    "power), but slower than an unlocked GPU's boost: compare locked runs with locked runs; every run "
    "records its clocks and clock events (summary.json gpu_state)"
)


def clocks_check(info: NvmlInfo, euid: int | None = None) -> Check:
    name = "GPU clocks locked"
    if info.error is not None or not info.gpus:
        return Check("gpu", name, None, "no GPU: clocks do not apply", None)
    locked = [c.get("locked") for c in info.clocks]
    if locked and all(locked):
        return Check("gpu", name, True, f"held on all {len(info.gpus)} GPU(s): {CLOCKS_MEANING}", None)
    top = next((c["max_sm_mhz"] for c in info.clocks if c.get("max_sm_mhz")), None)
    lock = f"sudo nvidia-smi -lgc {top},{top}" if top else "sudo nvidia-smi -lgc <MHz>,<MHz>"
    euid = os.geteuid() if euid is None else euid
    restricted = any(c.get("restricted") for c in info.clocks)
    detail = (
        "clocks float (GPU boost) on "
        + _gpu_summary(info.gpus)
        + ("" if None not in locked else " (some could not be read)")
        + ": the same GPU's throughput moves with its temperature and power"
    )
    if euid != 0 and restricted:
        fix = (
            f"locking needs root here (NVML restricts setting clocks): ask an administrator for `{lock}` "
            f"(undo: nvidia-smi -rgc); {CLOCKS_MEANING}"
        )
    else:
        fix = (
            f"for comparable runs lock them: `{lock}` (`nvidia-smi -q -d SUPPORTED_CLOCKS` lists the clocks; "
            f"undo: nvidia-smi -rgc); {CLOCKS_MEANING}"
        )
    return Check("gpu", name, False, detail, fix)


# ------------------------------------------------------------------------------------- Docker

NATIVE_NOTE = "the native launcher (`tbdkit bench`, --launcher native, the default) works without Docker"


def docker_client_check() -> Check:
    exe = shutil.which("docker")
    if exe is None:
        return Check(
            "docker",
            "Docker client",
            False,
            "docker is not on PATH",
            f"install Docker Engine (docs.docker.com/engine/install) to use the kit's images; {NATIVE_NOTE}",
        )
    rc, out, err = _run([exe, "version", "--format", "{{.Client.Version}}"])
    version = out.strip().splitlines()[0] if out.strip() else ""
    if version:  # docker prints the client part even when the daemon is unreachable (exit 1)
        return Check("docker", "Docker client", True, f"docker {version} at {exe}", None)
    return Check(
        "docker",
        "Docker client",
        False,
        f"{exe} did not report a version: {_one_line(err) or f'exit {rc}'}",
        f"reinstall Docker Engine (docs.docker.com/engine/install); {NATIVE_NOTE}",
    )


def docker_daemon_check(client: Check) -> Check:
    name = "Docker daemon"
    exe = shutil.which("docker")
    if not client.ok or exe is None:
        return Check("docker", name, None, "needs the Docker client", None)
    rc, out, err = _run([exe, "version", "--format", "{{.Server.Version}}"])
    if rc == 0 and out.strip():
        return Check("docker", name, True, f"Docker Engine {out.strip().splitlines()[0]} answering", None)
    text = _one_line(err) or (f"exit {rc}" if rc is not None else "no answer")
    if "permission denied" in text.lower():
        fix = (
            "add your user to the docker group (sudo usermod -aG docker $USER, then log in again) "
            f"or run with sudo; {NATIVE_NOTE}"
        )
    else:
        fix = f"start the Docker daemon (sudo systemctl start docker); {NATIVE_NOTE}"
    return Check("docker", name, False, f"not reachable: {text}", fix)


def nvidia_runtime_check(daemon: Check) -> Check:
    """How containers reach the GPUs: the launcher's own decision (images.gpu_access), so that
    doctor and `tbdkit bench --launcher docker` never disagree."""
    name = "NVIDIA container runtime"
    if not daemon.ok:
        return Check("docker", name, None, "needs a running Docker daemon", None)
    access = images.gpu_access()
    if access.ok:
        return Check("docker", name, True, access.detail, None)
    return Check(
        "docker",
        name,
        False,
        access.detail,
        f"{images.GPU_FIX} (the package installs {images.NVIDIA_HOOK}, which `docker run --gpus` uses), "
        "so containers can use the GPU",
    )


# --------------------------------------------------------------------------------- frameworks


def framework_check(name: str) -> Check:
    stack = stacks.STACKS.get(name)
    title = stack.title if stack else TITLES.get(name, name)
    check_name = f"{title} stack"
    if stack is None:
        return Check("frameworks", check_name, None, "not supported by this version of the kit yet", None)
    if stack.kit_env:
        kit = stacks.marker(name) or {}
        return Check("frameworks", check_name, True, f"numpy {kit.get('framework_version')} in "
                     f"{stacks.venv_path(name)}: {stacks.KIT_ENV_NOTE}", None)  # fmt: skip
    try:
        record = stacks.marker(name)
    except Exception as exc:
        return Check(
            "frameworks",
            check_name,
            False,
            f"could not read its environment: {_exc_text(exc)}",
            f"run `tbdkit setup {name} --force`",
        )
    where = stacks.venv_path(name)
    if record is None:
        return Check(
            "frameworks", check_name, False, f"not installed (no environment at {where})", f"run `tbdkit setup {name}`"
        )
    if stacks.is_adopted(record):
        return adopted_check(name, record)
    version = record.get("framework_version") if isinstance(record, dict) else None
    detail = f"{stack.module} {version}" if version else f"installed ({stack.module} version unknown)"
    detail += f" in {where}"
    try:
        current = stacks.is_current(name)
    except Exception:
        current = True
    lock_name = stacks.lock_of(stack).file.name
    if not current:
        detail += f"; its lock ({lock_name}) changed since it was installed"
    try:
        drift = stacks.drift(name) or []
    except Exception as exc:
        return Check(
            "frameworks",
            check_name,
            False,
            f"{detail}; its packages could not be compared with its lock: {_exc_text(exc)}",
            f"run `tbdkit setup {name} --force`",
        )
    if drift:
        return Check(
            "frameworks",
            check_name,
            False,
            f"{detail}; {len(drift)} package(s) differ from {lock_name}: {drift_text(drift)}",
            f"run `tbdkit setup {name} --force` (reinstalls it from its lock)",
        )
    if not current:
        return Check("frameworks", check_name, True, detail, f"run `tbdkit setup {name}` to bring it up to date")
    return Check("frameworks", check_name, True, detail + f"; matches {lock_name}", None)


def adopted_check(name: str, record: dict) -> Check:
    """An adopted stack (`tbdkit setup NAME --adopt PYTHON`): its framework is the interpreter's own, so
    differences from the lock are facts to record (each run's env.json has them), not a fault to fix. Only
    an interpreter whose packages are gone is a fault: adopt it (or another) again."""
    stack = stacks.get(name)
    adopted = record.get("adopted") or {}
    python = adopted.get("python", "?")
    detail = (
        f"adopted: {stack.module} {record.get('framework_version') or '(version unknown)'} of {python} "
        f"(Python {adopted.get('python_version', '?')}) in {stacks.venv_path(name)}"
    )
    gone = [d for d in stacks.adopted_site_dirs(record) if not Path(d).is_dir()]
    if gone:
        return Check(
            "frameworks",
            f"{stack.title} stack",
            False,
            f"{detail}; the adopted interpreter's packages are gone ({', '.join(gone)})",
            f"adopt it again: `tbdkit setup {name} --adopt {python}` (or another Python that holds {stack.title})",
        )
    missing = [m.get("requirement", "?") for m in record.get("missing") or [] if isinstance(m, dict)]
    if missing:
        detail += f"; without {', '.join(missing[:5])}" + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        detail += " (the models that need them do not run here; `--wheels DIR` installs them)"
    try:
        drift = stacks.drift(name) or []
    except Exception as exc:
        drift, detail = [], f"{detail}; its packages could not be compared with its lock: {_exc_text(exc)}"
    lock_file = str(record.get("lock_file") or record.get("lock") or "its lock").removeprefix("locks/")
    if drift:
        detail += f"; {len(drift)} package(s) differ from {lock_file} (kept as they are; runs record them): "
        detail += drift_text(drift)
    else:
        detail += f"; matches {lock_file}"
    return Check("frameworks", f"{stack.title} stack", True, detail, None)


def drift_text(drift: list[dict[str, str | None]], shown: int = 5) -> str:
    """`numpy 1.26.4 (locked 1.23.5), uv missing, six 1.17.0 (not in the lock)`, the first few."""
    parts = [
        f"{d['package']} missing (locked {d['locked']})"
        if d["installed"] is None
        else f"{d['package']} {d['installed']} (not in the lock)"
        if d["locked"] is None
        else f"{d['package']} {d['installed']} (locked {d['locked']})"
        for d in drift[:shown]
    ]
    return ", ".join(parts) + (f" and {len(drift) - shown} more" if len(drift) > shown else "")


# ---------------------------------------------------------------------------------- profiling

OPEN_COUNTERS = (
    "open them to all users as NVIDIA documents (ERR_NVGPUCTRPERM): put "
    "`options nvidia NVreg_RestrictProfilingToAdminUsers=0` in a file in /etc/modprobe.d/, "
    "update the initramfs (Ubuntu: sudo update-initramfs -u -k all), then reboot"
)
COUNTERS_FIX = (
    "GPU performance counters are admin-only here: run the profiler with sudo "
    f"(in a container add --cap-add=SYS_ADMIN), or {OPEN_COUNTERS}"
)


def _has_cap_sys_admin(status_path: Path) -> bool | None:
    """CAP_SYS_ADMIN in this process's effective set; None when it cannot be read."""
    try:
        for line in status_path.read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def counters_check(
    params_path: Path | None = None,
    euid: int | None = None,
    status_path: Path | None = None,
    platform: str | None = None,
) -> Check:
    """Whether this user may read the GPU performance counters (Nsight Compute needs them)."""
    name = "GPU performance counters"
    if (platform or sys.platform) != "linux":
        return Check("profiling", name, None, "checked on Linux only", None)
    params_path = params_path if params_path is not None else PARAMS_PATH
    status_path = status_path if status_path is not None else PROC_STATUS
    try:
        text = params_path.read_text()
    except FileNotFoundError:
        return Check("profiling", name, None, f"no NVIDIA driver loaded ({params_path} is missing)", None)
    except OSError as exc:
        return Check("profiling", name, None, f"could not read {params_path}: {exc.strerror or exc}", None)
    value = None
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key.strip() == "RmProfilingAdminOnly":
            value = rest.strip()
            break
    if value is None:
        return Check("profiling", name, None, f"{params_path} does not report RmProfilingAdminOnly", None)
    if value == "0":
        return Check("profiling", name, True, "open to all users (RmProfilingAdminOnly: 0)", None)
    if euid is None:
        euid = os.geteuid() if hasattr(os, "geteuid") else -1
    if euid == 0:
        cap = _has_cap_sys_admin(status_path)
        if cap is False:  # root in a container without CAP_SYS_ADMIN is still refused
            return Check(
                "profiling",
                name,
                False,
                f"admin-only (RmProfilingAdminOnly: {value}); root here lacks CAP_SYS_ADMIN",
                f"start the container with --cap-add=SYS_ADMIN, or {OPEN_COUNTERS}",
            )
        return Check("profiling", name, True, f"admin-only (RmProfilingAdminOnly: {value}), running as root", None)
    return Check(
        "profiling", name, False, f"admin-only (RmProfilingAdminOnly: {value}) and not running as root", COUNTERS_FIX
    )


NSIGHT = {
    "ncu": (
        "Nsight Compute (ncu)",
        "Compute",
        "needed for the hardware-counter pass of `python -m tbdkit.bench.reference`",
    ),
    "nsys": ("Nsight Systems (nsys)", "Systems", "not used by the kit; reported for your own profiling"),
}


def nsight_check(tool: str) -> Check:
    """Where the profiler is and its version, found as the kit finds it (tbdkit.env.nsight)."""
    title, what, use = NSIGHT[tool]
    exe = nsight.find(tool)
    if exe is None:
        return Check(
            "profiling",
            title,
            False if tool == "ncu" else None,
            f"not found ({use})",
            NSIGHT_FIX.format(what=what) if tool == "ncu" else None,
        )
    found = nsight.version(exe)
    where = exe if shutil.which(tool) else f"{exe} (not on PATH; the kit looks there)"
    if found:
        return Check("profiling", title, True, f"{tool} {found} at {where}", None)
    return Check(
        "profiling", title, False, f"{exe} --version did not report a version ({use})", NSIGHT_FIX.format(what=what)
    )


# ------------------------------------------------------------------------------ --graph compiled

COMPILED = "C compiler and Python headers (--graph compiled)"
# What Triton reads to build its launcher at run time (triton/runtime/build.py): $CC, else gcc, else clang;
# the include folder of the Python running it, from sysconfig (Debian's posix_local scheme read as posix_prefix).
_HEADERS = (
    "import os, sysconfig; s = sysconfig.get_default_scheme(); "
    "s = 'posix_prefix' if s == 'posix_local' else s; d = sysconfig.get_paths(scheme=s)['include']; "
    "print(d); print(os.path.isfile(os.path.join(d, 'Python.h')))"
)


def c_compiler() -> str | None:
    """The C compiler Triton would use: $CC, else gcc, else clang (as triton/runtime/build.py looks)."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")


def python_headers(python: str) -> tuple[str, bool] | None:
    """The include folder of `python` as Triton reads it, and whether Python.h is there; None if it did not say."""
    code, out, _ = _run([python, "-c", _HEADERS])
    lines = out.strip().splitlines()
    if code != 0 or len(lines) < 2:
        return None
    return lines[-2], lines[-1] == "True"


def compiled_check(info: NvmlInfo, python: str | None = None) -> Check:
    """`--graph compiled` on a GPU: torch.compile's inductor emits Triton kernels, and Triton builds its launcher
    with a C compiler against the stack's Python headers at run time; without them the run fails at its first
    compiled step. Checked for the PyTorch stack's interpreter (or this one when the stack is not installed)."""
    if python is None:
        try:
            installed: Path | None = stacks.python_of("pytorch")
        except UserError:  # TBDKIT_VENVS unusable: its own check says so
            installed = None
        python = str(installed) if installed is not None and installed.is_file() else sys.executable
    cc = c_compiler()
    headers = python_headers(python)
    missing = []
    if cc is None:
        missing.append("no C compiler ($CC unset, no gcc or clang on PATH)")
    if headers is None:
        missing.append(f"{python} did not say where its headers are")
    elif not headers[1]:
        missing.append(f"no Python.h in {headers[0]}")
    if not missing:
        return Check("frameworks", COMPILED, True, f"{cc}; Python.h in {headers[0]}" if headers else str(cc), None)
    detail = "; ".join(missing) + ": Triton cannot build its launcher, so a compiled run fails at its first step"
    fix = (
        "install a C compiler and the Python headers (Debian/Ubuntu: `apt-get install build-essential "
        "python3-dev`, or the -dev package of the stack's Python), or set CC; `--graph standard` needs neither"
    )
    if not info.gpus:
        return Check(
            "frameworks",
            COMPILED,
            None,
            detail + " (needed on a GPU only: a CPU run compiles with inductor's C++)",
            fix,
        )
    return Check("frameworks", COMPILED, False, detail, fix)


# ------------------------------------------------------------------------------------ all of it


def _safe(area: str, name: str, fn: Callable[[], Check]) -> Check:
    try:
        return fn()
    except Exception as exc:  # a bug in one check must not hide the others
        return Check(
            area,
            name,
            False,
            f"the check itself failed: {_exc_text(exc)}",
            "report this as a tbdkit bug, with the output of `tbdkit doctor --json`",
        )


def checks() -> list[Check]:
    """Every check, in display order. Never raises."""
    out: list[Check] = []
    try:
        info = probe_nvml()
    except Exception as exc:
        info = NvmlInfo(error=_exc_text(exc))
    out.append(_safe("gpu", "NVIDIA GPU", lambda: gpu_check(info)))
    out.append(_safe("gpu", "NVIDIA driver", lambda: driver_check(info)))
    out.append(_safe("gpu", "NVML", lambda: nvml_check(info)))
    out.append(_safe("gpu", "NVML GPM metrics", lambda: gpm_check(info)))
    out.append(_safe("gpu", "GPU clocks locked", lambda: clocks_check(info)))

    client = _safe("docker", "Docker client", docker_client_check)
    daemon = _safe("docker", "Docker daemon", lambda: docker_daemon_check(client))
    runtime = _safe("docker", "NVIDIA container runtime", lambda: nvidia_runtime_check(daemon))
    out += [client, daemon, runtime]

    for fw in KNOWN_FRAMEWORKS:
        title = TITLES.get(fw, fw)
        out.append(_safe("frameworks", f"{title} stack", functools.partial(framework_check, fw)))

    out.append(_safe("frameworks", COMPILED, lambda: compiled_check(info)))
    out.append(_safe("profiling", "GPU performance counters", counters_check))
    for tool in NSIGHT:
        out.append(_safe("profiling", NSIGHT[tool][0], functools.partial(nsight_check, tool)))
    return out


if __name__ == "__main__":  # `python -m tbdkit.env.doctor`: the JSON, without the CLI
    print(json.dumps(as_dict(checks()), indent=2))
