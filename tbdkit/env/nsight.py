"""The NVIDIA profilers the kit calls, found where NVIDIA's images and CUDA installs put them (the
command lines the kit gives Nsight Compute, and the parsing of what it writes: tbdkit.analysis.ncu).

Only Nsight Compute (`ncu`, the FP32/tensor-pipe pass of `python -m tbdkit.bench.reference`) is called
by the kit; Nsight Systems (`nsys`) is reported when present, never required. Where they live:
NGC's framework images install Nsight Compute as /opt/nvidia/nsight-compute/<version>/ncu (a
folder per version, the binary inside it, not on PATH); the CUDA toolkit puts it in
/usr/local/cuda/bin/ncu (a link to ../nsight-compute-<version>/ncu); Nsight Systems lives in
/opt/nvidia/nsight-systems/<version>/bin/nsys or /usr/local/cuda/bin/nsys.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

CANDIDATES = {
    "ncu": (
        "/usr/local/cuda/bin/ncu",
        "/opt/nvidia/nsight-compute/*/ncu",
        "/usr/local/cuda/nsight-compute-*/ncu",
        "/usr/local/cuda-*/bin/ncu",
    ),
    "nsys": (
        "/usr/local/cuda/bin/nsys",
        "/opt/nvidia/nsight-systems/*/bin/nsys",
        "/usr/local/cuda/nsight-systems-*/bin/nsys",
        "/usr/local/cuda-*/bin/nsys",
    ),
}
VERSION_TIMEOUT_S = 10.0


def _version_key(path: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", path)]


def find(tool: str, path_only: bool = False) -> str | None:
    """The tool's executable: on PATH first, else the newest version folder of NVIDIA's layouts."""
    found = shutil.which(tool)
    if found or path_only:
        return found
    for pattern in CANDIDATES[tool]:
        hits = [p for p in glob.glob(pattern) if os.access(p, os.X_OK) and os.path.isfile(p)]
        if hits:
            return max(hits, key=_version_key)
    return None


def version(exe: str, timeout: float = VERSION_TIMEOUT_S) -> str | None:
    """The version `exe --version` prints ("2025.3.1.0"), or None when it does not answer."""
    try:
        proc = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (proc.stdout + proc.stderr).splitlines():
        match = re.search(r"[Vv]ersion\s+(\d+(?:\.\d+)+)", line)
        if match:
            return match.group(1)
    return None


def tools() -> dict[str, dict[str, str | None]]:
    """Each profiler's path and version (None when absent), for env.json and `tbdkit doctor`."""
    out: dict[str, dict[str, str | None]] = {}
    for tool in CANDIDATES:
        exe = find(tool)
        out[tool] = {
            "path": exe,
            "version": version(exe) if exe else None,
            "required": "yes" if tool == "ncu" else "no: the kit never calls it",
        }
    return out
