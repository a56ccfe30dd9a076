"""The kit runs on Python 3.10, the Python of NVIDIA's MXNet image (Ubuntu 22.04).

The real check runs in tests/test_docker_real_mxnet.py, on Ubuntu 22.04's own Python 3.10 inside the
MXNet stand-in image: a Deep Speech 2 bench, and an import of every module. This file is the fast
check without Docker, vermin's: every module of the kit and the workloads is parsed, and each syntax
feature, stdlib module, function and argument it uses is looked up in vermin's tables of the Python
version that introduced it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def vermin() -> str:
    found = shutil.which("vermin") or (str(Path(sys.executable).parent / "vermin")
                                       if (Path(sys.executable).parent / "vermin").exists() else None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("vermin is not installed; it is in pyproject's test extra")
        pytest.skip("vermin is not installed here (pyproject's test extra installs it)")
    return found


def test_the_kit_and_the_workloads_need_no_more_than_python_3_10():
    proc = subprocess.run([vermin(), "--target=3.10-", "--violations", "--no-tips", "--eval-annotations",
                           str(ROOT / "tbdkit"), str(ROOT / "workloads")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Minimum required versions: 3.10" in proc.stdout or "Minimum required versions: 3." in proc.stdout


def test_pyproject_admits_python_3_10_with_tomli_standing_in():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^requires-python = ">=3\.10"$', text, flags=re.M)
    assert "\"tomli>=2; python_version < '3.11'\"" in text


@pytest.mark.parametrize("stack", ["pytorch", "tensorflow", "mxnet"])
def test_images_need_no_venv_module_with_pip(stack):
    """NGC's MXNet image has no python3.10-venv (no ensurepip): every image makes its environment
    without pip in it and runs the base's own pip, which it sees through --system-site-packages."""
    text = (ROOT / "docker" / f"{stack}.Dockerfile").read_text()
    assert f"/opt/tbdkit/stack-env.sh deps {stack}" in text and f"/opt/tbdkit/stack-env.sh kit {stack}" in text
    assert "--ignore-requires-python" not in text and "-m venv" not in text
    script = (ROOT / "docker" / "stack-env.sh").read_text()
    assert 'python3 -m venv --without-pip --system-site-packages "$venv"' in script
    assert '"$python" -m pip install' in script and "ensurepip" not in script.replace("no ensurepip", "")
