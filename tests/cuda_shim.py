"""Builds tests/fixtures/libcuda_shim.c into a shared library (gcc) and points
tbdkit.adapters.cuda_driver at it: the driver API's C signatures run through ctypes as on a GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SOURCE = Path(__file__).parent / "fixtures" / "libcuda_shim.c"


@pytest.fixture(scope="session")
def libcuda_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the CUDA driver stand-in")
    out = tmp_path_factory.mktemp("libcuda") / "libcuda.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", "-o", str(out), str(SOURCE)], check=True)
    return out


@pytest.fixture
def fake_libcuda(libcuda_path: Path, monkeypatch: pytest.MonkeyPatch):
    """fake_libcuda(gpus=[(bus, uuid_hex32)], fastest=i, driver=12040) installs the stand-in driver."""
    from tbdkit.adapters import cuda_driver

    def install(gpus: list[tuple[int, str]], fastest: int = 0, driver: int = 12040) -> None:
        monkeypatch.setattr(cuda_driver, "LIBCUDA", str(libcuda_path))
        monkeypatch.setenv("SHIM_GPUS", ",".join(f"{bus:02x}:{u}" for bus, u in gpus))
        monkeypatch.setenv("SHIM_FASTEST", str(fastest))
        monkeypatch.setenv("SHIM_DRIVER_VERSION", str(driver))
    return install
