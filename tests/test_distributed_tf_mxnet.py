"""Data-parallel TensorFlow and MXNet for real on this machine's CPU, through the CLI: two workers as separate
processes (MultiWorkerMirroredStrategy over RING; kvstore dist_sync with its scheduler and server) and MXNet's
replicas in one process. The group launcher that starts such workers (tbdkit.launch.group: each role's
environment, rank 0's run folder, a worker that dies named) on two "machines" as network namespaces, and with a
worker that dies, runs the machinery check's stack (NumPy in the kit's own environment, its gradients over the
agent's control channel); MXNet's kvstore across two machines runs in tests/test_slurm.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too
from tests.test_distributed import FAST, MACHINERY, agents_running, bench, kill_rank, namespaces, needs_root

# The two workers on both stacks train MiniGo's network: MXNet's smallest model, and the smallest that
# TensorFlow's MultiWorkerMirroredStrategy is built for (tbdkit.spec.run_spec.TF_DATA_PARALLEL_MODELS), whose
# replicated step builds and traces in a fraction of ResNet-50's seconds (docs/measured-here.md). Its step is
# milliseconds (once traced, on TensorFlow: the warm-up ends on that first step whatever the cap): 1 s of
# warm-up, a 3 s window. MXNet's replicas in one process train ResNet-50, a model --one-process is built for.
TWO_WORKERS = ["--model", "minigo", "--max-warmup-s", "1", "--max-measure-s", "3"]
ONE_PROCESS = ["--model", "resnet50"]
CHANNEL = "the agent's control channel"  # the machinery check's gradient exchange (tbdkit.adapters.numpy)


def run(results: Path, framework: str, *args: str, env: dict | None = None,
        cell: list[str] = TWO_WORKERS) -> tuple[subprocess.CompletedProcess, dict | None]:
    """A bench of the machinery check's stack, or of a real framework on `cell`'s model and caps (FAST's others)."""
    base = MACHINERY if framework == "numpy" else ["--framework", framework, *FAST[4:], *cell]
    return bench(results, *args, env=env, base=base)


def same_job(s: dict, results: Path, workers: int, backend: str) -> None:
    """The contract PyTorch's jobs keep: rank 0 writes the run folder and the job's metrics,
    every worker its own summary and log, all of them the same iterations."""
    assert s["status"] == "ok" and s["world_size"] == workers and s["worker"].startswith("rank 0"), s.get("error")
    m = s["metrics"]
    per = m["aggregate_throughput"]["per_worker"]
    assert len(per) == workers and all(v > 0 for v in per)
    assert m["throughput"]["value"] == m["aggregate_throughput"]["value"] == pytest.approx(sum(per), rel=1e-4)
    comm = m["communication_time"]
    if backend == CHANNEL:  # the machinery check times its exchange
        assert 0 < comm["value"] <= 100, comm
    else:  # neither framework times its collectives outside a profiler
        assert comm["value"] is None and comm["reason"]
    assert s["interconnect"]["backend"].startswith(backend)
    run_dir = results / s["run_id"]
    rows = [(run_dir / "iterations.csv").read_text().count("\n")]
    for rank in range(1, workers):
        own = json.loads((run_dir / "workers" / f"rank{rank}" / "summary.json").read_text())
        assert own["status"] == "ok" and own["worker"].startswith(f"rank {rank}")
        assert (run_dir / "workers" / f"rank{rank}.log").is_file()
        rows.append((run_dir / "workers" / f"rank{rank}" / "iterations.csv").read_text().count("\n"))
    assert len(set(rows)) == 1, rows  # the workers agreed on every stop
    assert agents_running(results) == []


@pytest.mark.parametrize("framework,backend", [("mxnet", "kvstore dist_sync"),
                                               ("tensorflow", "MultiWorkerMirroredStrategy/RING")])
def test_two_workers_on_one_machine(tmp_path, framework, backend):
    results = tmp_path / "results"
    proc, s = run(results, framework, "--gpus-per-node", "2")
    assert proc.returncode == 0 and s is not None, proc.stdout[-2000:] + proc.stderr[-3000:]
    same_job(s, results, 2, backend)
    if framework == "mxnet":  # MXNet's scheduler and server logs are kept beside the workers'
        run_dir = results / s["run_id"]
        assert (run_dir / "workers" / "scheduler.log").is_file() and (run_dir / "workers" / "server0.log").is_file()


def test_group_job_on_two_namespaces(tmp_path):
    needs_root()
    results = tmp_path / "results"
    proc, s = run(results, "numpy", "--nodes", "2", "--launcher", "netns", "--link-rate", "1gbit")
    assert proc.returncode == 0 and s is not None, proc.stdout[-2000:] + proc.stderr[-3000:]
    same_job(s, results, 2, CHANNEL)
    assert s["nodes"] == 2 and s["link_rate"] == "1gbit"
    assert s["interconnect"]["network"]["interface"].startswith("tb")  # the veth towards node 0, not loopback
    assert namespaces() == []


def test_a_dying_group_worker_ends_the_job_and_is_named(tmp_path):
    results = tmp_path / "results"
    proc, s = run(results, "numpy", "--gpus-per-node", "2", env=kill_rank(1))
    assert proc.returncode == 1 and "Traceback" not in proc.stdout, (proc.stdout + proc.stderr)[-3000:]
    assert s is not None and s["status"] == "failed"
    assert s["error"].startswith("worker rank 1 (node 0) died before writing its results (exit code 3)"), s["error"]
    assert "workers/rank1.log" in s["error"] and s["failed_worker"]["rank"] == 1
    assert agents_running(results) == []


def test_mxnet_replicas_in_one_process(tmp_path):
    """--one-process: one agent, two CPU contexts under the `device` kvstore, the global batch split
    between them; the job's metrics are the process's, the scaling against a single-replica run."""
    results = tmp_path / "results"
    single, s1 = run(results, "mxnet", cell=ONE_PROCESS)
    assert single.returncode == 0 and s1 is not None, single.stderr[-3000:]
    proc, s = run(results, "mxnet", "--gpus-per-node", "2", "--one-process", cell=ONE_PROCESS)
    assert proc.returncode == 0 and s is not None, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert s["status"] in MEASURED and s["world_size"] == 2 and s["replicas_per_process"] == 2
    assert s["worker"] == "one process, 2 replicas" and s["interconnect"]["backend"].startswith("kvstore device")
    m = s["metrics"]
    assert m["aggregate_throughput"]["value"] == m["throughput"]["value"] > 0
    assert m["per_worker_throughput"]["value"] == pytest.approx(m["throughput"]["value"] / 2, rel=1e-5)
    assert m["communication_time"]["value"] is None and m["communication_time"]["reason"]
    assert m["scaling_efficiency"]["baseline_run"] == s1["run_id"]
    run_dir = results / s["run_id"]
    assert not (run_dir / "workers").exists()  # one process: no worker folders
    rows = (run_dir / "iterations.csv").read_text().splitlines()
    assert rows[1].split(",")[5] == "4"  # samples per step: 2 replicas x the per-replica batch of 2
    env = json.loads((run_dir / "env.json").read_text())
    assert env["framework"]["kvstore"] == "device" and env["framework"]["replica_contexts"] == ["cpu(0)", "cpu(1)"]


@pytest.mark.parametrize("change,message", [
    ({"framework": "pytorch"}, "pytorch runs one worker process per GPU"),
    ({"model": "deepspeech2"}, "run deepspeech2 without --one-process"),
    ({"gpus_per_node": 1}, "--gpus-per-node 2 or more"),
    ({"nodes": 2, "launcher": "netns"}, "--nodes 1"),
])
def test_one_process_is_refused_where_it_is_not_built(change, message):
    from tbdkit.core.errors import UserError
    from tbdkit.spec.run_spec import build

    args = {"model": "resnet50", "framework": "mxnet", "batch_size": 2, "device": "cpu",
            "gpus_per_node": 2, "one_process": True, **change}
    with pytest.raises(UserError, match=message.replace("-", r"\-")):
        build(**args)
