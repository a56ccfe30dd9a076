"""Launchers own their differences: one table of what each launcher can run (tbdkit/spec/launchers.py), one
table of launchers behind one interface (tbdkit.launch.LAUNCHERS), the auto rule once, and one planner for
bench and sweep (tbdkit/bench/plan.py) that asks the launcher instead of asking for one by name."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any, get_args

import pytest

from tbdkit import launch
from tbdkit.bench import plan as planner
from tbdkit.core.errors import UserError
from tbdkit.launch.native import StackLauncher
from tbdkit.spec import launchers
from tbdkit.spec import run_spec as specs

ROOT = Path(__file__).resolve().parent.parent / "tbdkit"
NAMES = {"native", "docker", "netns", "slurm"}


def test_every_launcher_is_one_row_of_each_table():
    assert set(get_args(launchers.Name)) == set(launchers.TRAITS) == set(launch.LAUNCHERS) == NAMES
    assert all(launch.LAUNCHERS[name].name == name == launchers.TRAITS[name].name for name in NAMES)


def test_the_auto_rule():
    assert launchers.resolve("auto") == "native" and launchers.resolve("auto", nodes=2) == "netns"
    assert launchers.resolve("docker", nodes=2) == "docker"  # the spec refuses it, naming why
    assert launch.get("auto", 2).name == "netns"
    with pytest.raises(UserError, match="Unknown launcher 'k8s'"):
        launch.get("k8s")


def test_only_the_launcher_tables_ask_for_a_launcher_by_name():
    """`launcher == "docker"` and its kind are written in tbdkit/spec/launchers.py and tbdkit/launch/ only:
    everyone else asks a launcher's traits or the launcher itself."""
    allowed = {ROOT / "spec" / "launchers.py", *(ROOT / "launch").rglob("*.py")}
    found = []
    for path in sorted(set(ROOT.rglob("*.py")) - allowed):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                named = [s.value for s in sides if isinstance(s, ast.Constant) and s.value in NAMES]
                if named:
                    found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} compares with {named[0]!r}")
    assert found == []


def test_the_plan_resolves_launcher_preset_and_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    p = planner.plan("deepspeech2", None, "auto", "cpu", "auto", nodes=2, data="data")
    assert (p.launcher, p.preset, p.requested, p.data) == ("netns", "smoke", [], str(tmp_path / "data"))
    p = planner.plan("resnet50", ["all"], "paper", "cpu", "docker")
    assert (p.launcher, p.requested, p.checked) == ("docker", ["pytorch", "tensorflow", "mxnet"], p.requested)
    assert planner.plan("deepspeech2", None, "converge", "cpu", "native").requested == ["pytorch"]


def test_the_docker_launcher_is_not_asked_for_the_frameworks_gpus(monkeypatch):
    """A docker run's framework is asked by its container preflight: before the run, the host's GPUs decide
    the auto preset, and --device cuda is not refused here."""
    asked = []
    monkeypatch.setattr(StackLauncher, "framework_gpus", lambda self, fw: asked.append(fw) or (0, "no GPU"))
    monkeypatch.setattr(planner, "gpu_count", lambda: 1)
    assert planner.resolve_auto_preset("auto", ["pytorch"], "docker") == "paper" and asked == []
    assert planner.resolve_auto_preset("auto", ["pytorch"], "native") == "smoke" and asked == ["pytorch"]
    with pytest.raises(UserError, match="--device cuda: pytorch sees no GPU: no GPU"):
        planner.plan("deepspeech2", ["pytorch"], "smoke", "cuda", "native")
    planner.plan("deepspeech2", ["pytorch"], "smoke", "cuda", "docker")


def test_a_failed_preflight_leaves_no_run_folder(tmp_path, monkeypatch):
    """What a launcher can check is checked before launch() makes a run folder: here, a stack not installed."""
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path / "no-venvs"))
    spec = specs.build(model="deepspeech2", framework="pytorch", batch_size=2, preset="smoke", device="cpu")
    events: list[dict[str, Any]] = []
    with pytest.raises(UserError, match="tbdkit setup pytorch"):
        launch.launch(spec, tmp_path / "results", events.append)
    assert events == [] and not any((tmp_path / "results").glob("*/spec.json"))


DIGEST = "sha256:" + "1" * 64
# A stand-in docker CLI: an image that is built, a daemon without GPUs, a container that prints one event and
# dies with exit 3 before the agent writes its summary, and the daemon's logs and state of that container.
DOCKER = f"""#!/bin/sh
case "$1 $2" in
  "version "*) echo 24.0.7 ;;
  "image inspect") echo '[{{"Id": "{DIGEST}", "RepoDigests": [], "Config": {{"Labels": {{}}}}}}]' ;;
  "info "*) echo '{{"runc": {{}}}}' ;;
  "run "*) echo '@@tbdkit {{"event": "phase", "phase": "setup"}}'; echo "container: boom" >&2; exit 3 ;;
  "logs "*) echo "agent: boom" ;;
  "inspect "*) echo '{{"ExitCode": 3, "OOMKilled": false, "Error": "", "StartedAt": "t0", "FinishedAt": "t1"}}' ;;
  "rm "*|"kill "*) ;;
  *) echo "stand-in docker: unexpected $*" >&2; exit 99 ;;
esac
"""


def launch_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_cli: str,
                   events: list[dict[str, Any]]) -> launch.Outcome:
    """A Deep Speech 2 smoke run through the launch table with `docker_cli` as the docker CLI."""
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    docker.write_text(docker_cli)
    docker.chmod(0o755)
    monkeypatch.setenv("TBDKIT_DOCKER", str(docker))
    monkeypatch.delenv("TBDKIT_IMAGE_PYTORCH", raising=False)
    spec = specs.build(model="deepspeech2", framework="pytorch", batch_size=2, preset="smoke", device="cpu",
                       launcher="docker")
    return launch.launch(spec, tmp_path / "results", events.append)


def test_a_crashed_container_keeps_its_record_through_the_launch_table(tmp_path, monkeypatch):
    events: list[dict[str, Any]] = []
    outcome = launch_through(tmp_path, monkeypatch, DOCKER, events)
    assert [e["event"] for e in events][:2] == ["run_dir", "phase"]
    assert outcome.status == "failed" and outcome.summary["container"]["exit_code"] == 3
    assert "the container exited with code 3" in outcome.summary["error"]
    on_disk = json.loads((outcome.run_dir / "summary.json").read_text())
    assert on_disk["error"] == outcome.summary["error"] and on_disk["container"]["log"] == "container.log"
    assert (outcome.run_dir / "container.log").read_text().strip() == "agent: boom"
    assert "container: boom" in (outcome.run_dir / "log.txt").read_text()
    assert os.access(outcome.run_dir / "spec.json", os.R_OK)


def test_a_daemon_that_may_not_use_the_launchers_cores_is_one_sentence_with_the_fix(tmp_path, monkeypatch):
    """The daemon's answer (Docker 20.10 here, to `docker create --cpuset-cpus 7` on a 2-core machine) when the
    launcher's cores lie outside the daemon's own cpuset: `docker run` exits 125 before any container exists."""
    refused = "docker: Error response from daemon: Requested CPUs are not available - requested 7, available: 0-1."
    answers = {'  "run "*)': f'  "run "*) echo "{refused}" >&2; exit 125 ;;',
               '  "inspect "*)': '  "inspect "*) echo "Error: No such object: tbdkit-run" >&2; exit 1 ;;'}
    cli = "\n".join(next((a for k, a in answers.items() if line.startswith(k)), line) for line in DOCKER.splitlines())
    assert cli.count(refused) == 1 and "No such object" in cli
    outcome = launch_through(tmp_path, monkeypatch, cli, [])
    error = outcome.summary["error"]
    assert outcome.status == "failed" and "Requested CPUs are not available - requested 7" in error, error
    assert "taskset -c" in error and "--launcher native" in error and "Traceback" not in error


def test_the_launcher_is_resolved_once_for_plan_and_prepare(monkeypatch):
    """`plan` resolves the launcher (the auto rule) once; `prepare` preflights through that one."""
    asked: list[str] = []
    real = launch.get
    monkeypatch.setattr(launch, "get", lambda name, *a: asked.append(name) or real(name, *a))
    preflighted: list[str] = []
    p = planner.plan("deepspeech2", ["pytorch"], "smoke", "cpu", "auto")
    kind = type(p.chosen)  # a frozen dataclass: its class is patched
    monkeypatch.setattr(kind, "preflight", lambda self, fw, device, setup=False, busy=None: preflighted.append(fw))
    monkeypatch.setattr(kind, "frameworks", lambda self, model, requested, setup: list(requested))
    assert planner.prepare(p, "cpu", setup=False) == ["pytorch"]
    assert asked == ["auto"] and preflighted == ["pytorch"]
