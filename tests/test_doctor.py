"""`tbdkit doctor`: the real checks on this machine (no GPU), and each other situation simulated:
a fake NVML with an H100, no docker, a fake docker, restricted GPU counters, missing and installed
framework stacks, fake Nsight tools."""

from __future__ import annotations

import json
import shutil
import sys
import time
import types
from pathlib import Path

import pytest

from tbdkit.env import doctor
from tbdkit.env import images
from tbdkit.env import stacks
from tbdkit.env.doctor import Check

NAMES = [
    "NVIDIA GPU", "NVIDIA driver", "NVML", "NVML GPM metrics", "GPU clocks locked",
    "Docker client", "Docker daemon", "NVIDIA container runtime",
    "PyTorch stack", "TensorFlow stack", "MXNet stack", "NumPy stack", "C compiler and Python headers (--graph compiled)",
    "GPU performance counters", "Nsight Compute (ncu)", "Nsight Systems (nsys)",
]
NO_DRIVER_HERE = not Path("/proc/driver/nvidia").exists() and shutil.which("nvidia-smi") is None


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def assert_well_formed(checks: list[Check]) -> None:
    assert sorted(c.name for c in checks) == sorted(NAMES)  # every check, each exactly once
    for c in checks:
        assert c.area in {"gpu", "docker", "frameworks", "profiling"}
        assert c.ok in (True, False, None)
        assert c.detail and "\n" not in c.detail, c
        if c.ok is False:
            assert c.fix, f"{c.name} fails without saying how to fix it"


def fake_pynvml(gpus=("NVIDIA H100 80GB HBM3",), driver="580.65", cuda=13000, gpm=True,
                init_error: Exception | None = None, init_delay: float = 0.0) -> types.ModuleType:
    mod = types.ModuleType("pynvml")
    mod.calls = []

    def init():
        mod.calls.append("init")
        time.sleep(init_delay)
        if init_error is not None:
            raise init_error

    def gpm_support(handle):
        if isinstance(gpm, Exception):
            raise gpm
        return types.SimpleNamespace(isSupportedDevice=int(gpm))

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: mod.calls.append("shutdown")
    mod.nvmlSystemGetNVMLVersion = lambda: "13.580.65"
    mod.nvmlSystemGetDriverVersion = lambda: driver
    mod.nvmlSystemGetCudaDriverVersion_v2 = lambda: cuda
    mod.nvmlDeviceGetCount = lambda: len(gpus)
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    mod.nvmlDeviceGetName = lambda h: gpus[h[1]]
    mod.nvmlGpmQueryDeviceSupport = gpm_support
    return mod


class NVMLError_LibraryNotFound(Exception):  # named as pynvml names it
    pass


# ------------------------------------------------------------------------------ this machine

def test_checks_on_this_machine():
    t0 = time.monotonic()
    checks = doctor.checks()
    assert time.monotonic() - t0 < 8
    assert_well_formed(checks)
    c = by_name(checks)
    if not NO_DRIVER_HERE:
        pytest.skip("this machine has an NVIDIA driver: the no-GPU expectations do not apply")
    assert c["NVIDIA GPU"].ok is False and "NVIDIA driver" in c["NVIDIA GPU"].fix
    assert "null" in c["NVIDIA GPU"].fix  # says what happens without a GPU
    assert c["NVML"].ok is False and c["NVIDIA driver"].ok is False
    assert c["NVML GPM metrics"].ok is None
    assert c["GPU performance counters"].ok is None
    for name, title in (("tensorflow", "TensorFlow"), ("mxnet", "MXNet")):
        assert c[f"{title} stack"].ok is stacks.is_installed(name)


def test_as_dict_round_trips_through_json():
    checks = doctor.checks()
    rows = json.loads(json.dumps(doctor.as_dict(checks)))
    assert [Check(**r) for r in rows] == checks
    assert set(rows[0]) == {"area", "name", "ok", "detail", "fix"}


# ------------------------------------------------------------------------------------- GPU

def test_fake_h100_is_found_with_its_driver(monkeypatch):
    fake = fake_pynvml()
    monkeypatch.setattr(doctor, "pynvml", fake)
    checks = doctor.checks()
    assert_well_formed(checks)
    c = by_name(checks)
    gpu = c["NVIDIA GPU"]
    assert gpu.ok is True and gpu.fix is None
    assert "NVIDIA H100 80GB HBM3" in gpu.detail and "580.65" in gpu.detail and "13.0" in gpu.detail
    assert c["NVIDIA driver"].ok is True and "580.65" in c["NVIDIA driver"].detail
    assert c["NVML"].ok is True
    assert c["NVML GPM metrics"].ok is True
    assert fake.calls.count("init") == 1 and fake.calls[-1] == "shutdown"


def test_gpm_unsupported_on_older_gpu(monkeypatch):
    monkeypatch.setattr(doctor, "pynvml", fake_pynvml(gpus=("Tesla V100-SXM2-16GB",) * 2, gpm=False))
    info = doctor.probe_nvml()
    assert doctor.gpu_check(info).detail.startswith("2 × Tesla V100-SXM2-16GB")
    gpm = doctor.gpm_check(info)
    assert gpm.ok is False and "Hopper" in gpm.fix
    # a driver without the GPM entry point: still unsupported, never an exception
    monkeypatch.setattr(doctor, "pynvml", fake_pynvml(gpm=RuntimeError("Function Not Found")))
    gpm = doctor.gpm_check(doctor.probe_nvml())
    assert gpm.ok is False and "Function Not Found" in gpm.detail


def test_no_driver_and_hung_driver(monkeypatch):
    fake = fake_pynvml(init_error=NVMLError_LibraryNotFound("NVML Shared Library Not Found"))
    monkeypatch.setattr(doctor, "pynvml", fake)
    info = doctor.probe_nvml()
    assert doctor.gpu_check(info).fix == doctor.NO_DRIVER_FIX
    assert doctor.gpm_check(info).ok is None
    monkeypatch.setattr(doctor, "pynvml", fake_pynvml(init_delay=2.0))
    t0 = time.monotonic()
    info = doctor.probe_nvml(timeout=0.2)
    assert time.monotonic() - t0 < 1.5
    assert doctor.gpu_check(info).ok is False and "did not answer" in info.error


def test_driver_without_gpus(monkeypatch):
    monkeypatch.setattr(doctor, "pynvml", fake_pynvml(gpus=()))
    info = doctor.probe_nvml()
    gpu = doctor.gpu_check(info)
    assert gpu.ok is False and "--gpus" in gpu.fix
    assert doctor.driver_check(info).ok is True
    assert doctor.gpm_check(info).ok is None


# ---------------------------------------------------------------------------------- Docker

def test_no_docker_client(monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(doctor.shutil, "which", lambda cmd, *a, **k: None if cmd == "docker" else real_which(cmd, *a, **k))
    c = by_name(doctor.checks())
    assert c["Docker client"].ok is False and "install Docker" in c["Docker client"].fix
    assert "native" in c["Docker client"].fix
    assert c["Docker daemon"].ok in (None, False)
    assert c["NVIDIA container runtime"].ok is None


def fake_docker(bin_dir: Path, server: str, runtimes: str, cdi_dirs: str | None = None) -> None:
    """A docker on PATH answering `version` and `info` as a daemon would (server '' = down;
    cdi_dirs None: a daemon older than Docker 25, whose `info` has no CDISpecDirs field)."""
    bin_dir.mkdir(exist_ok=True)
    server_part = f"echo {server}" if server else \
        "echo 'permission denied while trying to connect to the Docker daemon socket' >&2; exit 1"
    script = bin_dir / "docker"
    script.write_text(f"""#!/bin/sh
case "$*" in
  *Client.Version*) echo 27.5.1 ;;
  *Server.Version*) {server_part} ;;
  *Runtimes*) echo '{runtimes}' ;;
  *CDISpecDirs*) {f"echo '{cdi_dirs}'" if cdi_dirs is not None else "echo 'template: :1:8: no field CDISpecDirs' >&2; exit 1"} ;;
  *) exit 2 ;;
esac
""")
    script.chmod(0o755)


def test_fake_docker_with_nvidia_runtime(monkeypatch, tmp_path):
    fake_docker(tmp_path / "bin", "27.5.1",
                '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"}}')
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    client = doctor.docker_client_check()
    assert client.ok is True and "27.5.1" in client.detail
    daemon = doctor.docker_daemon_check(client)
    assert daemon.ok is True and "27.5.1" in daemon.detail
    runtime = doctor.nvidia_runtime_check(daemon)
    assert runtime.ok is True and "nvidia" in runtime.detail


def test_fake_docker_without_nvidia_runtime_then_cdi(monkeypatch, tmp_path):
    fake_docker(tmp_path / "bin", "27.5.1", '{"runc":{"path":"runc"}}', '["/etc/cdi","/var/run/cdi"]')
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    monkeypatch.setattr(images, "CDI_DIRS", (cdi,))
    daemon = doctor.docker_daemon_check(doctor.docker_client_check())
    runtime = doctor.nvidia_runtime_check(daemon)
    assert runtime.ok is False and "NVIDIA Container Toolkit" in runtime.fix
    (cdi / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n")
    runtime = doctor.nvidia_runtime_check(daemon)
    assert runtime.ok is True and "nvidia.yaml" in runtime.detail


CDI_SPEC = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n"


@pytest.mark.parametrize("hook, runtimes, cdi_spec, cdi_dirs, expected", [
    # Docker's --gpus: the daemon registers its nvidia device driver only when it finds the hook
    (True, '{"runc":{}}', False, None, ["--gpus", "all"]),
    # a registered nvidia runtime without the hook on PATH: --gpus would fail, --runtime works
    (False, '{"runc":{},"nvidia":{"path":"nvidia-container-runtime"}}', False, None,
     ["--runtime", "nvidia", "--env", "NVIDIA_VISIBLE_DEVICES=all", "--env", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]),
    # CDI only (nvidia-container-toolkit-base): --device nvidia.com/gpu=all, when the daemon has CDI on
    (False, '{"runc":{}}', True, '["/etc/cdi","/var/run/cdi"]', ["--device", "nvidia.com/gpu=all"]),
    # a CDI spec that a daemon without CDI support cannot use, and nothing at all
    (False, '{"runc":{}}', True, None, None),
    (False, '{"runc":{}}', True, "[]", None),
    (False, '{"runc":{}}', False, None, None),
])
def test_doctor_and_the_docker_launcher_agree_on_the_gpus(monkeypatch, tmp_path, hook, runtimes, cdi_spec,
                                                           cdi_dirs, expected):
    from tbdkit.spec import run_spec as spec
    from tbdkit.core.errors import UserError
    from tbdkit.launch import docker as dl

    bin_dir = tmp_path / "bin"
    fake_docker(bin_dir, "27.5.1", runtimes, cdi_dirs)
    if hook:
        (bin_dir / images.NVIDIA_HOOK).write_text("#!/bin/sh\n")
        (bin_dir / images.NVIDIA_HOOK).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("TBDKIT_DOCKER", raising=False)
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    if cdi_spec:
        (cdi / "nvidia.yaml").write_text(CDI_SPEC)
    monkeypatch.setattr(images, "CDI_DIRS", (cdi,))
    daemon = doctor.docker_daemon_check(doctor.docker_client_check())
    check = doctor.nvidia_runtime_check(daemon)
    image = {"ref": "tbdkit/pytorch:0.1.0", "id": "sha256:" + "ab" * 32, "labels": {}}
    run = spec.build(model="deepspeech2", batch_size=2, launcher="docker", device="cuda")
    if expected is None:
        assert check.ok is False and check.fix
        with pytest.raises(UserError, match="no NVIDIA runtime"):
            dl.render(run, tmp_path / "r", image, images.gpu_access())
    else:
        assert check.ok is True
        argv = dl.render(run, tmp_path / "r", image, images.gpu_access())
        i = argv.index(expected[0])
        assert argv[i:i + len(expected)] == expected


def test_docker_daemon_permission_denied(monkeypatch, tmp_path):
    fake_docker(tmp_path / "bin", "", "null")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    client = doctor.docker_client_check()
    assert client.ok is True
    daemon = doctor.docker_daemon_check(client)
    assert daemon.ok is False and "docker group" in daemon.fix and "native" in daemon.fix
    assert doctor.nvidia_runtime_check(daemon).ok is None


# ----------------------------------------------------------------------- profiling counters

def params(tmp_path: Path, admin_only: int) -> Path:
    p = tmp_path / "params"
    p.write_text(f"ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: {admin_only}\nEnableMSI: 1\n")
    return p


def test_counters_restricted_for_non_root(monkeypatch, tmp_path):
    check = doctor.counters_check(params_path=params(tmp_path, 1), euid=1000, platform="linux")
    assert check.ok is False and "RmProfilingAdminOnly: 1" in check.detail
    assert "NVreg_RestrictProfilingToAdminUsers=0" in check.fix and "sudo" in check.fix
    # the same through checks(), with the module's path and euid replaced
    monkeypatch.setattr(doctor, "PARAMS_PATH", params(tmp_path, 1))
    monkeypatch.setattr(doctor.os, "geteuid", lambda: 1000)
    if sys.platform == "linux":
        assert by_name(doctor.checks())["GPU performance counters"].ok is False


def test_counters_open_or_root(tmp_path):
    assert doctor.counters_check(params_path=params(tmp_path, 0), euid=1000, platform="linux").ok is True
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nCapEff:\t000001ffffffffff\n")  # full capabilities
    root = doctor.counters_check(params_path=params(tmp_path, 1), euid=0, status_path=status, platform="linux")
    assert root.ok is True and "root" in root.detail
    status.write_text("Name:\tpython\nCapEff:\t00000000a80425fb\n")  # docker's default set: no CAP_SYS_ADMIN
    boxed = doctor.counters_check(params_path=params(tmp_path, 1), euid=0, status_path=status, platform="linux")
    assert boxed.ok is False and "--cap-add=SYS_ADMIN" in boxed.fix


def test_counters_not_applicable_without_driver(tmp_path):
    assert doctor.counters_check(params_path=tmp_path / "absent", euid=1000, platform="linux").ok is None
    assert doctor.counters_check(params_path=params(tmp_path, 1), euid=1000, platform="darwin").ok is None


# ------------------------------------------------------------------------------ frameworks

def test_missing_pytorch_stack(monkeypatch, tmp_path):
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path))
    c = by_name(doctor.checks())
    torch = c["PyTorch stack"]
    assert torch.ok is False and "tbdkit setup pytorch" in torch.fix
    assert str(tmp_path) in torch.detail


def test_installed_pytorch_stack(monkeypatch, tmp_path):
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path))
    env = tmp_path / "pytorch"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    record = {"stack": "pytorch", "framework_version": "2.14.1",
              "requirements_digest": stacks._requirements_digest(stacks.get("pytorch"))}
    (env / stacks.MARKER).write_text(json.dumps(record))
    monkeypatch.setattr(stacks, "drift", lambda name: [])  # its packages as locked (tests/test_locks.py: drift)
    check = doctor.framework_check("pytorch")
    assert check.ok is True and "2.14.1" in check.detail and check.fix is None
    record["requirements_digest"] = "stale"
    (env / stacks.MARKER).write_text(json.dumps(record))
    check = doctor.framework_check("pytorch")
    assert check.ok is True and "tbdkit setup pytorch" in check.fix


# ---------------------------------------------------------------------------------- Nsight

def test_nsight_tools(monkeypatch, tmp_path):
    from tbdkit.env import nsight

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    layout = tmp_path / "opt" / "nvidia" / "nsight-compute"
    monkeypatch.setitem(nsight.CANDIDATES, "ncu", (str(layout / "*" / "ncu"),))
    monkeypatch.setitem(nsight.CANDIDATES, "nsys", ())
    missing = doctor.nsight_check("ncu")
    assert missing.ok is False and "reference" in missing.detail and "Nsight Compute" in missing.fix
    # nsys is never required: the kit does not call it
    assert doctor.nsight_check("nsys").ok is None and doctor.nsight_check("nsys").fix is None
    # NGC's layout: one folder per version, the binary inside, nothing on PATH; the newest wins
    for ver in ("2024.1.0", "2025.3.1"):
        ncu = layout / ver / "ncu"
        ncu.parent.mkdir(parents=True)
        ncu.write_text("#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler'\n"
                       "echo 'Copyright (c) 2018-2025 NVIDIA Corporation'\n"
                       f"echo 'Version {ver}.0 (build 36398880) (public-release)'\n")
        ncu.chmod(0o755)
    found = doctor.nsight_check("ncu")
    assert found.ok is True and "ncu 2025.3.1.0" in found.detail and "2025.3.1/ncu" in found.detail
    assert nsight.tools()["ncu"] == {"path": str(layout / "2025.3.1" / "ncu"), "version": "2025.3.1.0",
                                     "required": "yes"}


def test_graph_compiled_on_a_gpu_needs_a_c_compiler_and_the_python_headers(monkeypatch, tmp_path):
    """Triton builds its launcher at run time with $CC (else gcc, else clang) against the stack's Python.h."""
    gpu = doctor.NvmlInfo(gpus=["NVIDIA H100 80GB HBM3"])
    headless = tmp_path / "python"  # a Python whose include folder has no Python.h
    headless.write_text(f"#!/bin/sh\necho {tmp_path / 'include'}\necho False\n")
    headless.chmod(0o755)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no gcc, no clang
    check = doctor.compiled_check(gpu, str(headless))
    assert check.ok is False and "no C compiler" in check.detail and f"no Python.h in {tmp_path / 'include'}" in check.detail
    assert "build-essential" in (check.fix or "") and "`--graph standard` needs neither" in (check.fix or "")
    assert doctor.compiled_check(doctor.NvmlInfo(), str(headless)).ok is None  # without a GPU: not needed
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "Python.h").write_text("")
    headless.write_text(f"#!/bin/sh\necho {tmp_path / 'include'}\necho True\n")
    monkeypatch.setenv("CC", "/usr/bin/cc")
    check = doctor.compiled_check(gpu, str(headless))
    assert check.ok is True and "/usr/bin/cc" in check.detail and "Python.h in" in check.detail
    assert doctor.COMPILED in {c.name for c in doctor.checks()}
