"""Every rendered cluster job finishes its run folder as the kit's launchers do: node 0's script of each
target (torchrun, Kubernetes, compose; Slurm's runs on a real cluster in test_slurm.py) is run here with
a `python` whose training step dies at once (exit 3), and leaves a summary that says so, names the failed
worker, an mllog.txt, and a spec.json that records the target it was rendered for. Training killed by SIGKILL
is said as the signal (the shell's 137); a killed write's temporary file goes where every process has ended
(one node) and stays where another node may still write. The finishing step run by hand on a folder without
the job's spec says so in one sentence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tbdkit.launch import render
from tbdkit.spec import run_spec as specs
from tests.killed_writes import killed_mid_write

ROOT = Path(__file__).resolve().parents[1]


def dying_python(folder: Path, death: str = 'echo "training died" >&2; exit 3') -> Path:
    """`python` whose training (torchrun, the node's roles) dies at once by `death` (exit 3); everything else is
    the kit's Python."""
    shim = folder / "bin" / "python"
    shim.parent.mkdir(parents=True)
    shim.write_text(
        "#!/usr/bin/env bash\n"
        f'case "$*" in *torch.distributed.run*|*tbdkit.launch.node*) {death};; esac\n'
        f'PYTHONPATH={ROOT} exec {sys.executable} "$@"\n'
    )
    shim.chmod(0o755)
    return shim


def node0_script(target: str, path: Path, tmp: Path) -> str:
    """What node 0 runs, with the container's /results and /spec mounts pointed at folders here."""
    if target == "torchrun":
        return path.read_text()
    docs = list(yaml.safe_load_all(path.read_text()))
    if target == "k8s":
        job = next(d for d in docs if d and d.get("kind") == "Job")
        script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    else:
        script = docs[0]["services"]["node0"]["command"][2].replace("$$", "$")
    return script.replace("/results/", f"{tmp}/results/").replace("/spec/", f"{tmp / 'spec'}/")


def run_node0(tmp_path: Path, target: str, nodes: int = 2, python: Path | None = None,
              before: Callable[[Path], object] = lambda run_dir: None) -> tuple[subprocess.CompletedProcess, Path]:
    """Node 0's script of a rendered job of `nodes` nodes run here (`before(run_dir)` first); its run folder."""
    spec = specs.build(model="resnet50", batch_size=2, launcher="netns", nodes=nodes, gpus_per_node=1, device="cpu")
    path = render.write(spec, target, tmp_path / "job", image="tbdkit/pytorch:0.1.0", run_id="r1",
                        results=str(tmp_path / "results"))
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "spec.json").write_text((tmp_path / "job" / "spec.json").read_text())
    python = python or dying_python(tmp_path)
    env = {**os.environ, "PATH": f"{python.parent}:{os.environ['PATH']}", "TBDKIT_PYTHON": str(python),
           "NODE_RANK": "0", "JOB_COMPLETION_INDEX": "0", "RESULTS": str(tmp_path / "results")}
    run_dir = tmp_path / "results" / "r1"
    before(run_dir)
    proc = subprocess.run(["bash", "-c", node0_script(target, path, tmp_path)], cwd=tmp_path / "job", env=env,
                          capture_output=True, text=True, timeout=120)
    assert "RuntimeWarning" not in proc.stderr, proc.stderr[-2000:]  # runpy's, of a module imported twice
    return proc, run_dir


@pytest.mark.parametrize("target", ["torchrun", "k8s", "compose"])
def test_a_rendered_job_finishes_its_run_folder(tmp_path, target):
    proc, run_dir = run_node0(tmp_path, target)
    assert proc.returncode == 3, proc.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["exit_code"] == 3
    assert "worker rank 0 (node 0) died before writing its results" in summary["error"], summary["error"]
    assert summary["failed_worker"]["rank"] == 0
    assert (run_dir / "mllog.txt").read_text().count(":::MLLOG") > 0
    assert json.loads((run_dir / "spec.json").read_text())["rendered_for"] == target


@pytest.mark.parametrize("target", ["torchrun", "k8s", "compose"])
def test_a_rendered_job_killed_by_a_signal_says_which_and_leaves_what_other_nodes_may_write(tmp_path, target):
    """Training killed by SIGKILL (the OOM killer): the shell's 137 is read as the signal it stands for. Node 0
    finishes while the other node's agents may still write, so their unfinished writes stay."""
    killed = dying_python(tmp_path, "kill -KILL $$")
    writes: list[Path] = []
    proc, run_dir = run_node0(tmp_path, target, python=killed,
                              before=lambda d: writes.append(killed_mid_write(d / "workers" / "rank1" / "summary.json")))
    assert proc.returncode == 137, proc.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["exit_code"] == -9 and summary["signal"] == "SIGKILL"
    assert summary["failed_worker"]["peers_error"].startswith("the agent was killed by SIGKILL"), summary
    assert writes[0].is_file()  # rank 1 runs on node 1, which node 0 cannot see end


def test_a_one_node_rendered_job_killed_mid_write_removes_the_unfinished_file_and_names_it(tmp_path):
    """One node: once torchrun returns every process of the job has ended, so a killed write's temporary file
    goes and the summary says which file it was."""
    writes: list[Path] = []
    proc, run_dir = run_node0(tmp_path, "torchrun", nodes=1, python=dying_python(tmp_path, "kill -KILL $$"),
                              before=lambda d: writes.append(killed_mid_write(d / "iterations.csv")))
    assert proc.returncode == 137, proc.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["error"] == ("the agent was killed by SIGKILL before writing its results; iterations.csv keeps "
                                "the 0 iteration(s) it measured; its unfinished write of iterations.csv was removed; "
                                "see log.txt"), summary["error"]
    assert not writes[0].exists() and not list(run_dir.rglob("*.tmp"))


@pytest.mark.parametrize("spec_json", [None, b"not json", b"[1, 2]", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000,
                                       b'{"model": 3}'])
def test_the_finishing_step_given_no_job_s_spec_says_so_in_one_sentence(tmp_path, spec_json):
    """A user who runs the finishing step by hand on the wrong folder, or on a damaged spec.json: one sentence and
    the fix, exit 2, nothing written."""
    if spec_json is not None:
        (tmp_path / "spec.json").write_bytes(spec_json)
    proc = subprocess.run([sys.executable, "-m", "tbdkit.launch.finish_rendered", "--run-dir", str(tmp_path),
                           "--exit-code", "137"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    (line,) = proc.stderr.splitlines()
    assert line.startswith("python -m tbdkit.launch.finish_rendered: ") and line.endswith(
        ("render the job again.", "as its script names it (RUN_DIR).")), line
    assert sorted(p.name for p in tmp_path.iterdir()) == (["spec.json"] if spec_json is not None else [])
