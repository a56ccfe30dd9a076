"""env.json: the machine, the software and the settings a run happened with."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import psutil
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import tbdkit
from tbdkit.core.paths import KIT_ROOT
from tbdkit.env import locks, nsight


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def git_state() -> dict[str, Any]:
    """The kit's commit: from the launcher (TBDKIT_GIT_COMMIT, e.g. inside an image), else git."""
    if os.environ.get("TBDKIT_GIT_COMMIT"):
        return {
            "commit": os.environ["TBDKIT_GIT_COMMIT"],
            "dirty": os.environ.get("TBDKIT_GIT_DIRTY") == "1",
            "source": "launcher",
        }
    try:
        commit = subprocess.run(
            ["git", "-C", str(KIT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "-C", str(KIT_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if commit.returncode == 0:
            return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip()), "source": "git"}
        return {"commit": None, "reason": commit.stderr.strip() or "not a git checkout"}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"commit": None, "reason": f"git unavailable: {exc}"}


def gpu_count() -> int:
    """The NVIDIA GPUs NVML sees on this host (0 without a driver or NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0


def gpus() -> dict[str, Any]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        return {"available": False, "reason": f"NVML not usable: {type(exc).__name__}: {exc}"}
    try:
        n = pynvml
        devices = []
        for i in range(n.nvmlDeviceGetCount()):
            h = n.nvmlDeviceGetHandleByIndex(i)
            mem = n.nvmlDeviceGetMemoryInfo(h)
            devices.append(
                {
                    "index": i,
                    "name": n.nvmlDeviceGetName(h),
                    "uuid": n.nvmlDeviceGetUUID(h),
                    "memory_total_mib": mem.total // 2**20,
                    "pci_bus_id": n.nvmlDeviceGetPciInfo(h).busId,
                }
            )
        return {
            "available": True,
            "driver_version": n.nvmlSystemGetDriverVersion(),
            "cuda_driver_version": n.nvmlSystemGetCudaDriverVersion_v2(),
            "devices": devices,
        }
    except Exception as exc:
        return {"available": False, "reason": f"NVML query failed: {type(exc).__name__}: {exc}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def packages() -> dict[str, str]:
    """Every installed distribution's name and version, each one's metadata parsed once (reading `.metadata` parses
    the METADATA file anew, and `.version` reads it again)."""
    metas = (d.metadata for d in importlib.metadata.distributions())
    return {m["Name"]: m["Version"] for m in metas if m["Name"]}


def container() -> dict[str, Any] | None:
    """The image a containerized run ran in, as its launcher passed it in (TBDKIT_IMAGE*)."""
    if not os.environ.get("TBDKIT_IMAGE"):
        return None
    return {
        "launcher": os.environ.get("TBDKIT_LAUNCHER"),
        "image": os.environ["TBDKIT_IMAGE"],
        "image_id": os.environ.get("TBDKIT_IMAGE_ID") or None,
        "image_digest": os.environ.get("TBDKIT_IMAGE_DIGEST") or None,
        "image_digest_note": None
        if os.environ.get("TBDKIT_IMAGE_DIGEST")
        else "built locally and never pushed: it has no registry digest; image_id is its content digest",
        "base_image": os.environ.get("TBDKIT_BASE_IMAGE") or None,
        "base_digest": os.environ.get("TBDKIT_BASE_DIGEST") or None,
    }


LAUNCH_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "OMP_NUM_THREADS",
    "GLOO_SOCKET_IFNAME",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "NVIDIA_TF32_OVERRIDE",
)


def launch_env() -> dict[str, Any]:
    """The settings the launcher gave this process that change where and how it computes and talks:
    its GPUs, NCCL's transports and host id, threads; and the netns launcher's node (TBDKIT_LAUNCH_NODE)."""
    env: dict[str, Any] = {k: v for k, v in sorted(os.environ.items()) if k in LAUNCH_VARS or k.startswith("NCCL_")}
    node = os.environ.get("TBDKIT_LAUNCH_NODE")
    if node:
        try:
            env["netns_node"] = json.loads(node)
        except ValueError:
            env["netns_node"] = {"unparsed": node}
    return env


def _torch_build(torch: Any) -> dict[str, Any]:
    nccl = torch.cuda.nccl.version() if hasattr(torch._C, "_nccl_version") else None
    return {
        "cuda": torch.version.cuda,
        "git": getattr(torch.version, "git_version", None),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
    }


def _tensorflow_build(tf: Any) -> dict[str, Any]:
    info = dict(tf.sysconfig.get_build_info())
    return {
        "cuda": info.get("cuda_version"),
        "cudnn": info.get("cudnn_version"),
        "nccl": None,
        "cuda_build": info.get("is_cuda_build"),
    }


def _mxnet_build(mx: Any) -> dict[str, Any]:
    features = mx.runtime.Features()
    return {
        "cuda": features.is_enabled("CUDA"),
        "cudnn": features.is_enabled("CUDNN"),
        "nccl": features.is_enabled("NCCL"),
        "note": "MXNet reports what it was built with, not versions",
    }


BUILDS = {"torch": _torch_build, "tensorflow": _tensorflow_build, "mxnet": _mxnet_build}


def framework_build() -> dict[str, Any] | None:
    """The framework build this process imported (an NGC image's own, or a wheel): its version,
    the file it was loaded from and the CUDA, cuDNN and NCCL it was built with."""
    for name, build in BUILDS.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        out: dict[str, Any] = {
            "module": name,
            "version": str(getattr(module, "__version__", "")) or None,
            "file": getattr(module, "__file__", None),
        }
        try:
            out.update(build(module))
        except Exception as exc:  # a build that lacks one of these queries still says what it is
            out["build_error"] = f"{type(exc).__name__}: {exc}"
        return out
    return None


CALIBRATION_FILE = "calibration.json"  # written by `tbdkit calibrate` (tbdkit.calibrate.record)
Verdict = Literal["trusted", "off", "unsupported"]


class CalibrationFile(BaseModel):
    """What a run reads of its results folder's calibration.json (tbdkit.calibrate.record writes it)."""

    model_config = ConfigDict(extra="allow")

    kind: Literal["tbdkit-calibration"] = "tbdkit-calibration"
    time_utc: str | None = None
    device: str | None = None
    quick: bool | None = None
    machine: dict[str, Any]
    verdicts: dict[str, Verdict] = Field(default_factory=dict)
    steadiness: dict[str, Any] | None = None  # the machine's own noise then (tbdkit.calibrate.steadiness)


def machine_identity() -> dict[str, Any]:
    """What makes two machines different instruments: host, CPU model and cores, GPUs by UUID, driver."""
    gpu = gpus()
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "logical_cores": psutil.cpu_count(logical=True),
        "gpu_uuids": sorted(str(d.get("uuid")) for d in gpu.get("devices", [])) if gpu.get("available") else [],
        "driver_version": gpu.get("driver_version"),
    }


def calibration(results_dir: Path) -> dict[str, Any]:
    """What env.json says of this machine's calibration: the results folder's own calibration.json
    (never one above it), its time and per-metric verdicts, when it was made on this very machine."""
    path = results_dir / CALIBRATION_FILE
    if not path.is_file():
        return {
            "calibrated": False,
            "reason": "no calibration.json in the results folder; run tbdkit calibrate",
        }
    try:
        doc = CalibrationFile.model_validate_json(path.read_bytes())
    except OSError as exc:
        return {"calibrated": False, "path": str(path), "reason": f"unreadable: {exc.strerror or exc}"}
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])[:80] or "the file"
        return {
            "calibrated": False,
            "path": str(path),
            "reason": f"calibration.json is not one tbdkit calibrate writes ({where}: {err['msg']}); run tbdkit "
            "calibrate again",
        }
    if doc.machine != machine_identity():
        return {
            "calibrated": False,
            "path": str(path),
            "reason": "calibration.json was made on another machine (identity differs); run tbdkit calibrate here",
        }
    return {
        "calibrated": True,
        "path": str(path.resolve()),
        "time_utc": doc.time_utc,
        "device": doc.device,
        "verdicts": dict(doc.verdicts),
        "steadiness": doc.steadiness,
    }


def lock_state() -> dict[str, Any]:
    """The lock of the environment this run ran in, and how its packages differ from it."""
    build = framework_build()
    try:
        return locks.this_environment(locks.MODULE_STACKS.get(build["module"]) if build else None)
    except Exception as exc:  # a lock that cannot be read is recorded, never a crashed run
        return {"name": None, "digest": None, "differences": None, "reason": f"{type(exc).__name__}: {exc}"}


def collect(framework_env: dict[str, Any], seed: int, results_dir: Path | None = None) -> dict[str, Any]:
    """env.json; `results_dir`: the results folder whose calibration.json names this machine's calibration."""
    mem = psutil.virtual_memory()
    return {
        "kit": {"version": tbdkit.__version__, "root": str(KIT_ROOT), "git": git_state()},
        "host": {
            "hostname": socket.gethostname(),
            "os": platform.platform(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "in_container": Path("/.dockerenv").exists() or bool(os.environ.get("TBDKIT_IMAGE")),
            "image": os.environ.get("TBDKIT_IMAGE"),
        },
        "cpu": {
            "model": cpu_model(),
            "logical_cores": psutil.cpu_count(logical=True),
            "physical_cores": psutil.cpu_count(logical=False),
            "affinity": len(psutil.Process().cpu_affinity()) if hasattr(psutil.Process(), "cpu_affinity") else None,
            "memory_total_mib": mem.total // 2**20,
        },
        "gpu": gpus(),
        "container": container(),
        "framework": framework_env,
        "launch_env": launch_env(),
        "framework_build": framework_build(),
        "tools": nsight.tools(),
        "seed": seed,
        "packages": packages(),
        "lock": lock_state(),
        "calibration": calibration(results_dir)
        if results_dir is not None
        else {"calibrated": False, "reason": "no results folder given, so no calibration to look for"},
    }
