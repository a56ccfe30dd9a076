"""Which GPU a run is on and why there is none, through the CUDA driver API's real C signatures
(tests/fixtures/libcuda_shim.c stands in for libcuda.so.1) and the real pynvml (tests/nvml_shim.py);
and `--preset auto` / `--device cuda` asking the framework stack itself, not the host's NVML."""

from __future__ import annotations

import pytest

from cuda_shim import fake_libcuda, libcuda_path  # noqa: F401  (fixtures)
from nvml_shim import Device, fake_nvml  # noqa: F401  (fixtures)
from tbdkit.adapters import cuda_driver
from tbdkit.agent.collectors.nvml import NvmlCollector

SLOW = (0x18, "aaaaaaaa" * 4)   # NVML's index 0 (lower PCI bus id)
FAST = (0x3B, "bbbbbbbb" * 4)   # NVML's index 1, which CUDA ranks first (FASTEST_FIRST)


def dashed(hex32: str) -> str:
    return f"GPU-{hex32[:8]}-{hex32[8:12]}-{hex32[12:16]}-{hex32[16:20]}-{hex32[20:]}"


@pytest.mark.parametrize("visible, order, expect", [
    (None, None, FAST),             # CUDA's ordinal 0 is the fastest GPU, NVML's index 1
    (None, "PCI_BUS_ID", SLOW),     # PCI order: the two agree
    ("1", None, SLOW),              # CUDA_VISIBLE_DEVICES=1 (CUDA's numbering) leaves the slower one as ordinal 0
])
def test_cuda_ordinal_names_its_physical_gpu(fake_libcuda, fake_nvml, monkeypatch, visible, order, expect):
    fake_libcuda([SLOW, FAST], fastest=1)
    for name, value in (("CUDA_VISIBLE_DEVICES", visible), ("CUDA_DEVICE_ORDER", order)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    ident = cuda_driver.identity(0)
    assert ident["uuid"] == dashed(expect[1]) and ident["pci_bus_id"] == f"00000000:{expect[0]:02X}:00.0"
    # ... and the NVML collector measures that GPU, by UUID or by PCI bus id alone
    fake_nvml([Device(dashed(SLOW[1]), f"00000000:{SLOW[0]:02X}:00.0", util=11),
               Device(dashed(FAST[1]), f"00000000:{FAST[0]:02X}:00.0", util=77)])
    want = 77 if expect == FAST else 11
    for c in (NvmlCollector(0, uuid=ident["uuid"]), NvmlCollector(0, pci_bus_id=ident["pci_bus_id"])):
        c.start()
        assert c.sample()["gpu_util_percent"] == want


def test_why_no_gpu_names_the_cause(fake_libcuda, monkeypatch):
    assert "CPU-only build" in cuda_driver.why_no_gpu("PyTorch", None)
    assert "`tbdkit setup mxnet --force`" in cuda_driver.why_no_gpu("MXNet", None)  # the stack's name, not its title
    monkeypatch.setattr(cuda_driver, "LIBCUDA", "/nonexistent/libcuda.so.1")
    assert "no NVIDIA driver" in cuda_driver.why_no_gpu("PyTorch", "13.0")
    fake_libcuda([SLOW], driver=12040)
    old = cuda_driver.why_no_gpu("PyTorch", "13.0")
    assert "too old" in old and "CUDA 12.4" in old and "CUDA 13.0" in old
    fake_libcuda([], driver=13000)
    assert "sees no GPU" in cuda_driver.why_no_gpu("PyTorch", "13.0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    fake_libcuda([SLOW], driver=13000)
    assert "CUDA_VISIBLE_DEVICES=''" in cuda_driver.why_no_gpu("TensorFlow", "12.5")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert "although the CUDA driver" in cuda_driver.why_no_gpu("MXNet", "unreported")


def test_auto_preset_asks_the_framework_not_the_host(fake_nvml, capsys):
    """The host's NVML sees a GPU; the installed PyTorch stack here sees none: auto is the smoke
    preset, and --device cuda stops with the framework's reason."""
    from tbdkit.env import stacks
    from tbdkit.bench.plan import gpu_count, resolve_auto_preset
    from tbdkit.core.errors import UserError

    if not stacks.is_installed("pytorch"):
        pytest.skip("the PyTorch stack is not installed")
    fake_nvml()
    assert gpu_count() == 1
    assert resolve_auto_preset("auto", ["pytorch"], "native") == "smoke"
    assert "pytorch sees no GPU" in capsys.readouterr().err
    with pytest.raises(UserError, match="--device cuda: pytorch sees no GPU: .*(driver|CPU-only)"):
        resolve_auto_preset("cuda", ["pytorch"], "native")
    assert resolve_auto_preset("cpu", ["pytorch"], "native") == "smoke"


def test_bench_device_cuda_stops_with_the_frameworks_reason(tmp_path):
    """`tbdkit bench --device cuda` on this GPU-less machine: one sentence naming the cause, no run."""
    import os
    import subprocess
    import sys

    from tbdkit.env import stacks

    if not stacks.is_installed("pytorch"):
        pytest.skip("the PyTorch stack is not installed")
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "bench", "--model", "resnet50", "--framework", "pytorch",
                           "--preset", "smoke", "--device", "cuda", "--results", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out
    assert "pytorch sees no GPU" in out and "driver" in out
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]
