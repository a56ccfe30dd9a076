"""env.json says which framework build the run imported (an NGC image's own or a wheel): its
version, the file it came from, the CUDA, cuDNN and NCCL it was built with; and the profilers'
paths and versions. Checked against each installed stack's real framework."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tbdkit.env import stacks

ROOT = Path(__file__).resolve().parents[1]
MODULES = {"pytorch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet"}
PROBE = """
import json, sys, {module}
from tbdkit.env import machine as envinfo
info = envinfo.collect({{}}, 0)
print(json.dumps({{"build": info["framework_build"], "tools": info["tools"],
                  "version": str({module}.__version__), "file": {module}.__file__}}))
"""


@pytest.mark.parametrize("stack", sorted(MODULES))
def test_env_json_names_the_framework_build_it_imported(stack):
    if not stacks.is_installed(stack):
        if os.environ.get("CI"):
            pytest.fail(f"the {stack} stack is not installed; make test-host sets it up")
        pytest.skip(f"the {stack} stack is not installed here")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([str(stacks.python_of(stack)), "-c", PROBE.format(module=MODULES[stack])],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    build = out["build"]
    assert build["module"] == MODULES[stack] and build["version"] == out["version"]
    assert build["file"] == out["file"] and "build_error" not in build, build
    assert {"cuda", "cudnn", "nccl"} <= set(build)
    # the profilers: where they are and their version, or null where absent (never required but ncu)
    assert set(out["tools"]) == {"ncu", "nsys"}
    for tool in out["tools"].values():
        assert (tool["path"] is None) == (tool["version"] is None)
