"""The CUDA driver API (libcuda.so.1) through ctypes, for what the frameworks do not all report:
which physical GPU a CUDA ordinal is (UUID, PCI bus id) and why no GPU is usable.

CUDA ordinals here are this process's: after CUDA_VISIBLE_DEVICES and in CUDA_DEVICE_ORDER (fastest
first by default), the same numbering the frameworks use, so ordinal N is the framework's GPU N.
No framework is imported; nothing here initializes a GPU context (cuInit only loads the driver).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

LIBCUDA = "libcuda.so.1"
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INSUFFICIENT_DRIVER = 35
NO_DRIVER = (
    "no NVIDIA driver is visible to this process ({lib} cannot be loaded): on a GPU machine install the "
    "NVIDIA driver; in a container, start it with `--gpus all` (the NVIDIA Container Toolkit adds the driver)"
)


class _CUuuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


def _load() -> Any:
    return ctypes.CDLL(LIBCUDA)


def _fn(cuda: Any, name: str, *argtypes: Any) -> Any:
    f = getattr(cuda, name)
    f.argtypes, f.restype = list(argtypes), ctypes.c_int
    return f


def driver_cuda_version(cuda: Any = None) -> int | None:
    """The CUDA version the driver supports, as CUDA encodes it (12040 = 12.4), or None without a driver."""
    try:
        cuda = cuda or _load()
    except OSError:
        return None
    v = ctypes.c_int(0)
    return v.value if _fn(cuda, "cuDriverGetVersion", ctypes.POINTER(ctypes.c_int))(ctypes.byref(v)) == 0 else None


def version_text(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def identity(ordinal: int) -> dict[str, Any]:
    """{"uuid": "GPU-…", "pci_bus_id": "00000000:18:00.0"} of this process's CUDA device `ordinal`,
    each None (with "reason") where the driver cannot say."""
    try:
        cuda = _load()
    except OSError as exc:
        return {"uuid": None, "pci_bus_id": None, "reason": f"{LIBCUDA} not loadable: {exc}"}
    if _fn(cuda, "cuInit", ctypes.c_uint)(0) != 0:
        return {"uuid": None, "pci_bus_id": None, "reason": "cuInit failed"}
    dev = ctypes.c_int(0)
    if _fn(cuda, "cuDeviceGet", ctypes.POINTER(ctypes.c_int), ctypes.c_int)(ctypes.byref(dev), ordinal) != 0:
        return {"uuid": None, "pci_bus_id": None, "reason": f"cuDeviceGet({ordinal}) failed"}
    out: dict[str, Any] = {
        "uuid": None,
        "pci_bus_id": None,
        "source": f"CUDA driver API cuDeviceGetUuid_v2 / cuDeviceGetPCIBusId of CUDA ordinal {ordinal}",
    }
    u = _CUuuid()
    if _fn(cuda, "cuDeviceGetUuid_v2", ctypes.POINTER(_CUuuid), ctypes.c_int)(ctypes.byref(u), dev.value) == 0:
        h = bytes(u.bytes).hex()
        out["uuid"] = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    buf = ctypes.create_string_buffer(64)
    if _fn(cuda, "cuDeviceGetPCIBusId", ctypes.c_char_p, ctypes.c_int, ctypes.c_int)(buf, 64, dev.value) == 0:
        out["pci_bus_id"] = buf.value.decode()
    return out


def why_no_gpu(framework: str, built_cuda: str | None) -> str:
    """One sentence: why `framework` (built for CUDA `built_cuda`, None if CPU-only) sees no GPU, and the fix."""
    if not built_cuda:
        return (
            f"the installed {framework} is a CPU-only build (no CUDA): install its CUDA build "
            f"(`tbdkit setup {framework.lower()} --force` on a GPU machine) or run with --device cpu"
        )
    try:
        cuda = _load()
    except OSError:
        return NO_DRIVER.format(lib=LIBCUDA)
    driver = driver_cuda_version(cuda)
    major = str(built_cuda).split(".")[0]
    need_major = int(major) if major.isdigit() else None  # None: the framework does not say (MXNet 1.9)
    built = f"CUDA {built_cuda}" if need_major is not None else "CUDA of an unreported version"
    if driver is not None and need_major is not None and driver // 1000 < need_major:
        return (
            f"the NVIDIA driver is too old for this {framework} build: it supports CUDA {version_text(driver)}, "
            f"the build needs {built}; update the driver, or install a {framework} build for "
            f"CUDA {version_text(driver)}"
        )
    code = _fn(cuda, "cuInit", ctypes.c_uint)(0)
    if code == CUDA_ERROR_NO_DEVICE:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return (
            "the NVIDIA driver sees no GPU"
            + (f" (CUDA_VISIBLE_DEVICES={visible!r} hides the others)" if visible is not None else "")
            + ": check `nvidia-smi`, and in a container start it with `--gpus all`"
        )
    if code == CUDA_ERROR_INSUFFICIENT_DRIVER:
        return (
            f"the NVIDIA driver (CUDA {version_text(driver) if driver else '?'}) is too old for this {framework} "
            f"build ({built}): update the driver"
        )
    if code != 0:
        return f"the CUDA driver failed to initialize (cuInit error {code}): check `nvidia-smi` and the driver install"
    return (
        f"{framework} (built for {built}) sees no GPU although the CUDA driver "
        f"(CUDA {version_text(driver) if driver else '?'}) does: check the build's CUDA libraries"
    )
