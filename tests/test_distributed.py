"""Data-parallel runs for real on this machine's CPU: torchrun with 2 gloo workers (PyTorch's DDP), 4 workers of
the machinery check's stack (NumPy in the kit's own environment, gradients over the agent's control channel)
against their single-worker baseline, two "machines" as network namespaces over veth with and without a
1 Gbit/s link, a worker that dies, and the rendered Slurm, Kubernetes and compose files checked by their tools."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tbdkit.launch import render
from tbdkit.spec import run_spec as specs
from tbdkit.core.errors import UserError
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

FAST = ["--model", "resnet50", "--framework", "pytorch", "--preset", "smoke", "--device", "cpu", "--batch", "2",
        "--max-warmup-s", "3", "--max-measure-s", "6", "--json"]
# the machinery check's stack: a run in about a second of its own, with the same caps' flags
MACHINERY = ["--model", "mlp_numpy", "--framework", "numpy", "--preset", "smoke", "--device", "cpu",
             "--max-warmup-s", "1", "--max-measure-s", "1", "--json"]


FAULTS = Path(__file__).with_name("agent_faults")  # its sitecustomize patches the agent's warm-up stage


def faults(**variables: str) -> dict[str, str]:
    """The environment in which the agent takes the faults `variables` name (tests/agent_faults)."""
    path = os.pathsep.join(p for p in (str(FAULTS), os.environ.get("PYTHONPATH", "")) if p)
    return {**variables, "PYTHONPATH": path}


def kill_rank(rank: int) -> dict[str, str]:
    """The environment in which the agent of worker `rank` dies after its warm-up."""
    return faults(TBDKIT_TEST_KILL_RANK=str(rank))


def slow_steps(seconds: float) -> dict[str, str]:
    """The environment in which every training step from the warm-up on takes `seconds` more: a run of the
    machinery check's stack is then in warm-up for 100 steps (MeasurePolicy.min_warmup_iterations) or more."""
    return faults(TBDKIT_TEST_STEP_SLEEP_S=str(seconds))


def bench(results: Path, *args: str, env: dict | None = None,
          base: list[str] = FAST) -> tuple[subprocess.CompletedProcess, dict | None]:
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "bench", *base, "--results", str(results), *args],
                          capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})})
    try:
        (summary,) = json.loads(proc.stdout)
    except (json.JSONDecodeError, ValueError):
        summary = None
    return proc, summary


def namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("tbdkit-")]


def agents_running(results: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "tbdkit.agent"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(results) in line]


def needs_root() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root with iproute2 (.ci/run installs it)")
        pytest.skip("network namespaces need root and iproute2")


def test_spec_rules_for_several_workers():
    assert specs.build(model="resnet50", batch_size=2, gpus_per_node=4).world_size == 4
    with pytest.raises(UserError, match="--launcher netns"):
        specs.build(model="resnet50", batch_size=2, nodes=2)
    with pytest.raises(UserError, match="data-parallel TensorFlow"):
        specs.build(model="deepspeech2", framework="tensorflow", batch_size=2, gpus_per_node=2)
    with pytest.raises(UserError, match="tc rate"):
        specs.build(model="resnet50", batch_size=2, nodes=2, launcher="netns", link_rate="fast")


def test_workers_on_one_machine(tmp_path):
    """The machinery check's stack: 4 workers (the group launcher's processes), scaled against the single-worker run
    made first. PyTorch's 2 torchrun workers (DDP over gloo): tests/test_fsdp.py's DDP job, checked the same way."""
    results = tmp_path / "results"
    # the single-worker baseline that scaling efficiency is measured against
    proc, single = bench(results, base=MACHINERY)
    assert proc.returncode == 0 and single is not None, proc.stderr[-3000:]
    proc, s = bench(results, "--gpus-per-node", "4", base=MACHINERY)
    assert proc.returncode == 0 and s is not None, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert_workers_trained_together(results, s, 4, "numpy", single)


def assert_workers_trained_together(results: Path, s: dict, workers: int, framework: str, single: dict | None) -> None:
    """A job of `workers` on one machine: every rank's summary and log, the aggregate throughput, a communication
    time, the interconnect, the same iteration count on every rank; scaling efficiency against `single` (PyTorch:
    none, with the reason)."""
    assert s["status"] in MEASURED and s["world_size"] == workers and s["worker"].startswith("rank 0")
    m = s["metrics"]
    per = m["aggregate_throughput"]["per_worker"]
    assert len(per) == workers and m["aggregate_throughput"]["value"] == pytest.approx(sum(per), rel=1e-4)
    assert m["throughput"]["value"] == m["aggregate_throughput"]["value"]
    assert 0 < m["communication_time"]["value"] <= 100
    backend = "gloo" if framework == "pytorch" else "the agent's control channel (mean of 4 workers' gradients"
    assert s["interconnect"]["backend"].startswith(backend) and s["interconnect"]["gpu_link"] is None
    run = results / s["run_id"]
    for rank in range(1, workers):
        own = json.loads((run / "workers" / f"rank{rank}" / "summary.json").read_text())
        assert own["status"] in MEASURED and own["worker"].startswith(f"rank {rank}")
        log = run / "workers" / (f"rank{rank}/log.txt" if framework == "pytorch" else f"rank{rank}.log")
        assert log.stat().st_size > 0
    iterations = [(run / "iterations.csv").read_text().count("\n")] + [
        (run / "workers" / f"rank{r}" / "iterations.csv").read_text().count("\n") for r in range(1, workers)]
    assert len(set(iterations)) == 1  # the workers agreed on every stop: same number of iterations
    eff = m["scaling_efficiency"]
    if single is not None:
        assert eff["value"] > 0 and eff["baseline_run"] == single["run_id"]
    else:
        assert eff["value"] is None and "single-worker run" in eff["reason"]


def test_two_namespaces_and_a_1gbit_link(tmp_path):
    needs_root()
    results = tmp_path / "results"
    per_worker = {}
    for rate in (None, "1gbit"):  # short caps: each phase ends on the iteration that passes its cap
        proc, s = bench(results, "--nodes", "2", "--launcher", "netns", *(["--link-rate", rate] if rate else []),
                        "--max-warmup-s", "1", "--max-measure-s", "2")
        assert proc.returncode == 0 and s is not None and s["status"] in MEASURED, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert s["nodes"] == 2 and s["world_size"] == 2 and s["link_rate"] == rate
        assert s["interconnect"]["network"]["interface"].startswith("tb")
        run = results / s["run_id"]
        assert (run / "workers" / "node1.log").is_file() and (run / "workers" / "rank1" / "summary.json").is_file()
        per_worker[rate] = s["metrics"]["per_worker_throughput"]["value"]
        assert namespaces() == []  # removed after each job
    # Observation 12's direction: 100 MB of ResNet-50 gradients per step make a 1 Gbit/s link the bottleneck.
    assert per_worker["1gbit"] < 0.8 * per_worker[None], per_worker
    assert agents_running(results) == []


def test_a_dying_worker_ends_the_job_and_is_named(tmp_path):
    results = tmp_path / "results"
    proc, s = bench(results, "--gpus-per-node", "2", env=kill_rank(1))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in proc.stdout, out[-3000:]
    assert s is not None and s["status"] == "failed"
    assert s["error"].startswith("worker rank 1 (node 0) died before writing its results"), s["error"]
    assert "workers/rank1/log.txt" in s["error"] and s["failed_worker"] == {**s["failed_worker"], "rank": 1, "node": 0}
    run = results / s["run_id"]
    assert (run / "log.txt").stat().st_size > 0 and (run / "workers" / "rank1" / "log.txt").stat().st_size > 0
    assert agents_running(results) == []



def test_a_node_whose_worker_was_killed_exits_as_a_shell_and_srun_say_it(tmp_path):
    """tbdkit.launch.node, what srun or a pod runs on each node: its worker killed by SIGKILL makes it exit 137
    (128 + 9, as a shell and srun report a process killed by signal 9; its -9 passed to sys.exit read 247), and its
    report gives the signal in torchrun's words. In a network namespace of its own (its port is the fixed 29500)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("a network namespace of its own needs root, unshare and iproute2")
    spec = specs.build(model="mlp_numpy", framework="numpy", batch_size=2, gpus_per_node=2, device="cpu",
                       preset="smoke", measure={"max_warmup_s": 1, "max_measure_s": 1})
    (tmp_path / "spec.json").write_text(json.dumps(spec.recorded().model_dump()))
    env = {**os.environ, **kill_rank(1), "TBDKIT_TEST_KILL_SIGNAL": "KILL", "TBDKIT_CONTROL_KEY": "ab" * 16}
    node = [sys.executable, "-m", "tbdkit.launch.node", "--node", "0", "--hosts", "127.0.0.1",
            "--spec", str(tmp_path / "spec.json"), "--run-dir", str(tmp_path)]
    proc = subprocess.run(["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *node],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 137, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "rank: 1 (local_rank: 1)\n  exitcode: -9 (pid: " in proc.stdout, proc.stdout[-2000:]


def test_workers_found_failed_at_one_look_are_all_reported_the_one_a_signal_killed_first(capsys):
    """Rank 1 killed by SIGKILL and rank 0 ended with 1 on losing it, both gone before the node's next look (it
    looks every 0.5 s): each is written in torchrun's words, rank 1 first, and the node exits as rank 1 died."""
    from tbdkit.launch.node import _report
    from tbdkit.launch.roles import Role

    exited = subprocess.Popen(["sh", "-c", "exit 1"])
    killed = subprocess.Popen(["sh", "-c", "kill -KILL $$"])
    failed = [(Role("rank0", 0, {}, 0, 0), exited, exited.wait()), (Role("rank1", 0, {}, 1, 1), killed, killed.wait())]
    assert _report(failed) == -9
    out = capsys.readouterr().out
    assert out.index("rank: 1 (local_rank: 1)\n  exitcode: -9") < out.index("rank: 0 (local_rank: 0)\n  exitcode: 1")


def test_rendered_files_pass_their_checkers(tmp_path):
    spec = specs.build(model="resnet50", batch_size=64, preset="paper", launcher="netns", nodes=2, gpus_per_node=4)
    paths = {t: render.write(spec, t, tmp_path / t, image="tbdkit/pytorch:0.1.0") for t in render.TARGETS}
    for t in ("torchrun", "slurm"):
        assert subprocess.run(["bash", "-n", str(paths[t])], capture_output=True).returncode == 0
    directives = [line.split()[1] for line in paths["slurm"].read_text().splitlines() if line.startswith("#SBATCH")]
    assert {d.split("=")[0] for d in directives} >= {"--nodes", "--gpus-per-node", "--ntasks-per-node", "--time"}
    assert all(d.startswith("--") and ("=" in d or d == "--exclusive") for d in directives)
    assert "--nodes=2" in directives and "--gpus-per-node=4" in directives
    assert "DEFAULT_IMAGE=tbdkit/pytorch:0.1.0" in paths["slurm"].read_text()
    validate = Path(sys.executable).with_name("kubernetes-validate")
    proc = subprocess.run([str(validate), "--strict", str(paths["k8s"])], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.count("passed") + proc.stderr.count("passed") == 3, proc.stdout + proc.stderr
    assert json.loads((tmp_path / "k8s" / "spec.json").read_text())["nodes"] == 2
    compose = shutil.which("docker-compose")
    if compose is None:
        if os.environ.get("CI"):
            pytest.fail(".ci/run installs docker-compose")
        pytest.skip("no docker-compose here")
    proc = subprocess.run([compose, "-f", str(paths["compose"]), "config", "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
