"""TensorFlow's own Dockerfile, built on a CPU stand-in for its NGC base (docker/ci/make-standin.sh:
the framework wheel from pyproject's extra in the system Python, as NGC holds it), then the MiniGo
bench in a container, run by an unprivileged user through `tbdkit bench --launcher docker`.

The image (2.7 GB) is built only on overlay2: under the vfs storage driver, which copies the whole file
system for every layer, it filled a 35 GB disk. Needs a running Docker daemon, as tests/test_docker_real.py."""

from __future__ import annotations

import pytest
from real_containers import (
    assert_base_framework_ran,
    build_ci_image,
    check_stack_bench,
    results,
    skip_without_daemon,
    storage_driver,
    user_kit,
)

__all__ = ["results", "user_kit"]  # fixtures, used by name


@pytest.fixture(scope="module")
def ci_image() -> tuple[str, dict]:
    skip_without_daemon()
    if storage_driver() == "vfs":
        print("skipping the tensorflow image: dockerd runs on vfs, which copies its 2.7 GB file system per layer")
        pytest.skip("the tensorflow image is not built under the vfs storage driver (disk)")
    return build_ci_image("tensorflow")


def test_the_tensorflow_image_builds_and_benches(ci_image, user_kit, results):
    tag, built = ci_image
    env = check_stack_bench("tensorflow", tag, built, user_kit, results)
    assert env["framework"]["framework_version"] == "2.21.0"
    assert_base_framework_ran(env, "2.21.0")
