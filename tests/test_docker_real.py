"""A real container: build the pytorch stack's image on a Debian bookworm base made here (no
registry), run `tbdkit bench --launcher docker` as an unprivileged user, and check that the run
directory lands on the mounted volume owned by that user with the image recorded; then a
container that crashes, which must leave its log and a failed summary. The other stacks' images:
tests/test_docker_real_tensorflow.py and tests/test_docker_real_mxnet.py.

Needs a running Docker daemon (.ci/run installs docker.io and starts dockerd). It skips only
when the daemon could not be started (.ci/run says why in TBDKIT_DOCKERD_ERROR), or, outside
CI, when there is no daemon."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from real_containers import (
    MODEL,
    ROOT,
    assert_base_framework_kept,
    assert_base_framework_ran,
    assert_removed,
    bench_as_user,
    build_ci_image,
    invoking_uid,
    only_run,
    results,
    skip_without_daemon,
    user_kit,
)

from tbdkit.env import cpus, images
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

TAG = "tbdkit-ci/pytorch:cpu"
CRASH_TAG = "tbdkit-ci/pytorch:crash"

__all__ = ["results", "user_kit"]  # fixtures, used by name


@pytest.fixture(scope="module")
def ci_image():
    skip_without_daemon()
    _, found = build_ci_image("pytorch", TAG)
    assert_base_framework_kept(TAG, "pytorch")
    return found


def test_bench_in_a_container(ci_image, user_kit, results):
    # launched on one core of a machine with more, the container runs on that core alone (--cpuset-cpus)
    mask, machine = cpus.affinity(), cpus.online()
    launched_on = mask[:1] if len(machine) > 1 else None
    t0 = time.monotonic()
    proc = bench_as_user(user_kit, results, TAG, cores=launched_on)
    print(f"docker bench: {time.monotonic() - t0:.1f} s")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    run = only_run(results)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] in MEASURED, summary
    assert summary["metrics"]["throughput"]["value"] > 0 and summary["device"] == "cpu"
    env = json.loads((run / "env.json").read_text())
    container = env["container"]
    assert container["image"] == TAG and container["launcher"] == "docker"
    assert container["image_id"] == ci_image["id"] and container["image_id"].startswith("sha256:")
    assert container["image_digest"] is None and "content digest" in container["image_digest_note"]
    assert container["base_image"] == "tbdkit-ci/pytorch-base"
    assert env["host"]["in_container"] is True
    budget = env["cpu_budget"]
    assert budget["affinity"] == (launched_on or machine) and budget["intra_op"] == 1, budget
    assert env["framework"]["framework_version"].startswith("2.13.0")
    # the base's own framework build, not one the image installed over it (NGC's torch stays)
    assert_base_framework_ran(env, "2.13.0+cpu")
    assert env["tools"]["ncu"] == {"path": None, "version": None, "required": "yes"}
    assert env["kit"]["git"]["source"] == "launcher" and env["kit"]["git"]["commit"]
    for path in run.iterdir():
        assert (path.stat().st_uid, path.name) == (invoking_uid(), path.name)
    log = (run / "log.txt").read_text()
    assert "$ " in log and "--network none" in log
    assert "--cap-drop ALL" in log and "--security-opt no-new-privileges" in log and "SYS_ADMIN" not in log
    assert (f"--cpuset-cpus {cpus.cpu_list(launched_on)}" in log) if launched_on else ("--cpuset-cpus" not in log)
    assert not (run / "container.log").exists()
    assert_removed(f"tbdkit-{run.name}")


def test_a_crashing_container_leaves_its_log_and_a_failed_summary(ci_image, user_kit, results):
    # The same image, the benched model's PyTorch module replaced by one that aborts the interpreter.
    dockerfile = f"FROM {TAG}\nRUN printf 'import os\\nos.abort()\\n' > /opt/tbdkit/src/workloads/{MODEL}/pytorch.py\n"
    build = subprocess.run([images.docker_binary(), "build", "--tag", CRASH_TAG, "-"], input=dockerfile,
                           capture_output=True, text=True, timeout=600, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    assert build.returncode == 0, build.stderr
    proc = bench_as_user(user_kit, results, CRASH_TAG)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out
    run = only_run(results)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "exited with code 134" in summary["error"] and "container.log" in summary["error"]
    assert summary["container"]["exit_code"] == 134
    state = json.loads((run / "container.json").read_text())
    assert state["exit_code"] == 134 and state["oom_killed"] is False
    log = (run / "container.log").read_text()
    assert "setup" in log  # the agent's own log lines, as the container printed them
    assert_removed(f"tbdkit-{run.name}")


def test_a_base_is_imported_once_per_tarball(ci_image):
    """make-base.sh imports its cached tarball under a tag once: run again, the image keeps its id (so
    Docker's build cache serves the stand-in built on it and the stack's layers below the kit's own)."""
    tag = "tbdkit-ci/import-probe"
    try:
        runs, ids = [], []
        for _ in range(2):
            runs.append(subprocess.run(["bash", str(ROOT / "docker/ci/make-base.sh"), tag], capture_output=True,
                                       text=True, timeout=600))
            assert runs[-1].returncode == 0, runs[-1].stderr[-2000:]
            ids.append((images.inspect_image(tag) or {}).get("id"))
        assert "imported " + tag in runs[0].stdout and "already holds" in runs[1].stdout, [r.stdout for r in runs]
        assert ids[0] and ids[0].startswith("sha256:") and ids[1] == ids[0], ids
    finally:
        images.docker("rmi", tag, check=False)
