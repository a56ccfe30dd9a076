"""MXNet's own Dockerfile, built on a CPU stand-in for its NGC base: Ubuntu 22.04 with Python 3.10 and no
venv module, as NGC's MXNet image is (docker/ci/make-standin.sh puts MXNet in its system Python).
There the agent trains on Python 3.10, from an environment installed at its image lock's versions: the
MiniGo bench in a container, run by an unprivileged user through `tbdkit bench --launcher docker`; and
every kit module and MXNet workload file imported by that Python.

Needs a running Docker daemon, as tests/test_docker_real.py."""

from __future__ import annotations

import json

import pytest
from real_containers import (
    assert_base_framework_ran,
    build_ci_image,
    check_stack_bench,
    results,
    skip_without_daemon,
    user_kit,
)

from tbdkit.env import images

__all__ = ["results", "user_kit"]  # fixtures, used by name


@pytest.fixture(scope="module")
def ci_image() -> tuple[str, dict]:
    skip_without_daemon()
    return build_ci_image("mxnet")


def test_the_mxnet_image_builds_and_benches(ci_image, user_kit, results):
    tag, built = ci_image
    env = check_stack_bench("mxnet", tag, built, user_kit, results)
    assert env["framework"]["framework_version"] == "1.9.1"
    assert_base_framework_ran(env, "1.9.1")
    assert env["host"]["python"].startswith("3.10.") and "glibc2.35" in env["host"]["os"], env["host"]
    lock = env["lock"]
    assert lock["name"] == "mxnet-image" and lock["python"] == "3.10", lock
    assert lock["installed_from_digest"] == lock["digest"] and "note" not in lock, lock
    assert lock["differences"] == [], lock  # the stand-in's own packages are the lock's versions too


# Every module of the kit, and every MXNet workload file, imported by the Python 3.10 of the MXNet
# image (Ubuntu 22.04's, as in NGC's MXNet image). Only the other frameworks' adapters may fail, and
# only because their framework is not in this image.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
import tbdkit
from tbdkit.spec import catalog
failed = {}
names = [m.name for m in pkgutil.walk_packages(tbdkit.__path__, "tbdkit.") if not m.name.endswith("__main__")]
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = [type(exc).__name__, getattr(exc, "name", None)]
workloads = []
for model in catalog.models().values():
    for part in ("data", "mxnet"):
        if (model.folder / (part + ".py")).is_file():
            try:
                catalog.load_module(model, part)
                workloads.append(model.name + "/" + part)
            except Exception as exc:
                failed[model.name + "/" + part] = [type(exc).__name__, str(exc)]
print(json.dumps({"python": sys.version.split()[0], "modules": names, "workloads": workloads, "failed": failed}))
"""
OTHER_FRAMEWORKS = {"torch", "keras", "tensorflow"}


def test_every_kit_module_and_mxnet_workload_imports_on_python_3_10(ci_image):
    tag, _ = ci_image
    proc = images.docker("run", "--rm", "--network", "none", tag, "python", "-c", IMPORT_ALL, timeout=600)
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["python"].startswith("3.10."), found["python"]
    assert len(found["modules"]) > 100 and "tbdkit.agent.run" in found["modules"], found["modules"]
    assert len(found["workloads"]) >= 2 * 10 and "deepspeech2/mxnet" in found["workloads"], found["workloads"]
    unexpected = {name: why for name, why in found["failed"].items()
                  if not (why[0] == "ModuleNotFoundError" and why[1] in OTHER_FRAMEWORKS)}
    assert unexpected == {}, unexpected
    # only the adapters and describers of PyTorch and TensorFlow (pytorch*, tensorflow*), and nothing else
    assert all(name.rsplit(".", 1)[-1].split("_")[0] in {"pytorch", "tensorflow"}
               for name in found["failed"]), found["failed"]
    print(f"Python {found['python']}: {len(found['modules']) - len(found['failed'])} of {len(found['modules'])} "
          f"kit modules and {len(found['workloads'])} workload files imported")
