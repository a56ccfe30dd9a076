"""`tbdkit bench --launcher slurm` against a real Slurm cluster on this machine (tests/slurm_cluster.py: munged,
slurmctld and two slurmd "machines", each in its own network namespace with its own host name), typed as a
user types it from the repo root. The scheduler's machinery runs the machinery check's stack (NumPy in the
kit's own environment, a step well under a millisecond): a one-node run, a two-node job whose run folder
matches a two-node netns run's in every file's keys and columns, a job cancelled with Ctrl-C in warm-up, a
job past its time limit, a node killed mid-run, a worker killed by SIGKILL in the middle of a write, and a
job submitted with --no-wait then gathered. What each
framework does on its own runs once per framework, as a real two-node job of that framework on a small model
of the catalog that it trains data-parallel: two-node PyTorch DDP (srun starting torchrun on each node; ViT's
smoke network), TensorFlow's MultiWorkerMirroredStrategy (MiniGo's network, the smallest of the models it is
built for: tbdkit.spec.run_spec.TF_DATA_PARALLEL_MODELS) and MXNet's kvstore dist_sync (MiniGo's network, its
smallest). Each ends with a complete, honest run folder in the index."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tbdkit.results.index import Index
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too
from tests.killed_writes import killed_mid_write
from tests.slurm_cluster import Cluster, cluster
from tests.test_distributed import slow_steps

ROOT = Path(__file__).resolve().parents[1]
TBDKIT = ".venv/bin/tbdkit"
FAST = ["--preset", "smoke", "--device", "cpu", "--batch", "2", "--max-warmup-s", "3", "--max-measure-s", "6"]
CELLS = {"pytorch": "vit", "tensorflow": "minigo", "mxnet": "minigo", "numpy": "mlp_numpy"}
MACHINERY = "numpy"  # the machinery check's stack (tbdkit.core.frameworks.MACHINERY)
CAPS = {MACHINERY: ["--preset", "smoke", "--device", "cpu", "--max-warmup-s", "1", "--max-measure-s", "1"],
        # a step of ViT's or MiniGo's smoke network is a fraction of a second (once traced, on TensorFlow: its
        # warm-up ends on that first step whatever the cap): 1 s of warm-up, a 3 s window
        **{f: [*FAST[:6], "--max-warmup-s", "1", "--max-measure-s", "3"] for f in ("pytorch", "tensorflow", "mxnet")}}
HELD = slow_steps(3.0)  # a machinery run in warm-up for 300 s or more: interrupted, timed out or a node lost in it


@pytest.fixture(scope="session")
def slurm(tmp_path_factory) -> Cluster:
    """One cluster for every Slurm test; its daemons stopped by their PIDs at the end, whatever happened."""
    missing = [c for c in ("munged", "slurmctld", "slurmd", "sbatch") if shutil.which(c) is None]
    if os.geteuid() != 0 or missing or shutil.which("ip") is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs as root with slurm-wlm, munge and iproute2 (.ci/run installs them); missing {missing}")
        pytest.skip("a Slurm cluster here needs root, iproute2, slurm-wlm and munge")
    with cluster(tmp_path_factory.mktemp("slurm")) as c:
        yield c


def command(results: Path, framework: str, *args: str) -> list[str]:
    return [TBDKIT, "bench", "--model", CELLS[framework], "--framework", framework, *CAPS.get(framework, FAST),
            "--launcher", "slurm", "--results", str(results), "--json", *args]


def bench(slurm: Cluster, results: Path, framework: str, *args: str,
          env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(command(results, framework, *args), cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env={**slurm.env, **(env or {})})
    try:
        (summary,) = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no summary: {proc.stdout[-2000:]}{proc.stderr[-4000:]}\n{slurm.logs()[-3000:]}")
    return proc, summary


def complete(results: Path, summary: dict) -> Path:
    """The run folder is in the index, with its summary, mllog and the job's record."""
    run_dir = results / summary["run_id"]
    for name in ("spec.json", "summary.json", "mllog.txt", "log.txt"):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "spec.json").read_text())["launcher"] == "slurm"
    assert summary["slurm"]["job_id"] and summary["slurm"]["state"]
    assert Index(results).find(summary["run_id"]) == run_dir
    return run_dir


def queue_empty(slurm: Cluster) -> bool:
    return subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=slurm.env).stdout.strip() == ""


def test_one_node_bench(slurm, tmp_path):
    results = tmp_path / "results"
    proc, s = bench(slurm, results, MACHINERY)
    assert proc.returncode == 0 and s["status"] in MEASURED, s.get("error")
    assert s["slurm"]["state"] == "COMPLETED" and s["slurm"]["nodes"] == "n0"
    run_dir = complete(results, s)
    assert "# Slurm job" in (run_dir / "log.txt").read_text()
    assert "warm-up" in proc.stderr and "measuring" in proc.stderr  # the agent's events reached the live progress


def _shape(path: Path) -> object:
    """A file's keys (JSON, nested) or columns (CSV); None for text."""
    if path.suffix == ".json":
        def keys(v: object) -> object:
            return {k: keys(x) for k, x in v.items()} if isinstance(v, dict) else None
        return keys(json.loads(path.read_text()))
    if path.suffix == ".csv":
        with path.open() as f:
            return next(csv.reader(f), [])
    return None


def shapes(run_dir: Path) -> dict[str, object]:
    return {str(p.relative_to(run_dir)): _shape(p) for p in sorted(run_dir.rglob("*")) if p.is_file()}


def two_node_job(slurm: Cluster, results: Path, framework: str) -> tuple[dict, Path]:
    """A two-node job that finished: rank 0's run folder in the index, rank 1's summary and the other node's
    output in it (torchrun's on node 1, or rank 1's as tbdkit.launch.node starts it)."""
    proc, s = bench(slurm, results, framework, "--nodes", "2")
    assert proc.returncode == 0 and s["status"] in MEASURED, s.get("error")
    assert s["world_size"] == 2 and s["slurm"]["nodes"] == "n[0-1]"
    run_dir = complete(results, s)
    rank1 = json.loads((run_dir / "workers" / "rank1" / "summary.json").read_text())
    assert rank1["status"] in MEASURED and rank1["worker"].startswith("rank 1")
    assert (run_dir / "workers" / ("node1.log" if framework == "pytorch" else "rank1.log")).is_file()
    assert s["metrics"]["scaling_efficiency"]["value"] is not None or s["metrics"]["scaling_efficiency"]["reason"]
    return s, run_dir


def test_two_node_job_matches_a_netns_run(slurm, tmp_path):
    results = tmp_path / "results"
    s, run_dir = two_node_job(slurm, results, MACHINERY)
    local = tmp_path / "netns"
    netns = subprocess.run([TBDKIT, "bench", "--model", CELLS[MACHINERY], "--framework", MACHINERY, *CAPS[MACHINERY],
                            "--nodes", "2", "--launcher", "netns", "--results", str(local), "--json"], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
    (other,) = json.loads(netns.stdout)
    assert other["status"] in MEASURED, other.get("error")
    mine, theirs = shapes(run_dir), shapes(local / other["run_id"])
    # the Slurm job's own record is the one key a netns run has no counterpart for (docker adds its container's)
    mine["summary.json"].pop("slurm")  # type: ignore[union-attr]
    # env.json's launch_env is a map of the variables the launcher set (the netns launcher's NCCL_* and node,
    # which make namespaces act as machines; Slurm's nodes are machines): compared as a key, not by its variables
    for shape in (mine, theirs):
        for name in ("env.json", "workers/rank1/env.json"):
            shape[name]["launch_env"] = "the launcher's variables"  # type: ignore[index]
    assert set(mine) == set(theirs)
    for name in mine:
        assert mine[name] == theirs[name], name


def test_two_node_pytorch_ddp(slurm, tmp_path):
    """srun starts torchrun on each node, whose workers join over gloo across the nodes' link."""
    s, _ = two_node_job(slurm, tmp_path / "results", "pytorch")
    assert s["interconnect"]["backend"] == "gloo"


@pytest.mark.parametrize("framework,backend", [("tensorflow", "MultiWorkerMirroredStrategy"),
                                               ("mxnet", "kvstore dist_sync")])
def test_two_node_tensorflow_and_mxnet(slurm, tmp_path, framework, backend):
    s, _ = two_node_job(slurm, tmp_path / "results", framework)
    assert s["interconnect"]["backend"].startswith(backend)


def _started(proc: subprocess.Popen, word: str, timeout: float = 600) -> list[str]:
    """Wait until `word` shows in the live progress (stderr), read by a thread; the rest is read on."""
    lines: list[str] = []
    assert proc.stderr is not None
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout
    while not any(word in line for line in lines) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    assert any(word in line for line in lines), "".join(lines)
    return lines


def in_warm_up(slurm: Cluster, results: Path, act: Callable[[subprocess.Popen], object], *args: str,
               after: Callable[[], object] = lambda: None) -> tuple[subprocess.Popen, dict]:
    """A machinery job held in its warm-up (`args` added), `act` done to it once its warm-up shows, followed to
    the end (`after` then, whatever happened); the process and the summary it printed."""
    cmd = command(results, MACHINERY, *args, "--max-warmup-s", "600")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**slurm.env, **HELD})
    try:
        _started(proc, "warm-up")
        act(proc)
        out = proc.stdout.read()  # type: ignore[union-attr]
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        after()
    (s,) = json.loads(out)
    return proc, s


def test_ctrl_c_in_warm_up_cancels_the_job(slurm, tmp_path):
    results = tmp_path / "results"
    proc, s = in_warm_up(slurm, results, lambda job: job.send_signal(signal.SIGINT))
    assert proc.returncode == 130 and s["status"] == "interrupted", s.get("error")
    assert "scancel" in s["error"] and queue_empty(slurm)
    complete(results, s)


def test_a_job_past_its_time_limit_says_so(slurm, tmp_path):
    results = tmp_path / "results"
    proc, s = bench(slurm, results, MACHINERY, "--max-warmup-s", "600", "--time-limit", "1", env=HELD)
    assert proc.returncode == 1 and s["status"] == "failed"
    assert s["slurm"]["state"] == "TIMEOUT" and "TIMEOUT" in s["error"] and "time limit" in s["error"], s["error"]
    complete(results, s)


def test_a_node_killed_mid_run_fails_the_job_naming_it(slurm, tmp_path):
    results = tmp_path / "results"

    def back() -> None:
        if "n1" not in slurm.daemons:
            slurm.start_slurmd(1)  # the machine comes back (ReturnToService=2) for the tests after this one

    proc, s = in_warm_up(slurm, results, lambda job: slurm.kill_node(1), "--nodes", "2", after=back)
    assert proc.returncode == 1 and s["status"] == "failed"
    assert s["slurm"]["state"] in ("NODE_FAIL", "FAILED"), s["slurm"]
    assert "rank 1 (node 1)" in s["error"] or "NODE_FAIL" in s["error"], s["error"]
    complete(results, s)
    slurm.wait_idle(120)


def _agent(run_dir: Path, rank: int) -> int:
    """The pid of worker `rank`'s agent of the job writing into `run_dir` (its node's processes are this
    machine's: the cluster's nodes are namespaces of net, host name and mounts, not of process ids)."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tbdkit.agent" in argv and str(run_dir).encode() in argv and f"RANK={rank}".encode() in env:
            return int(proc.name)
    raise AssertionError(f"no agent of rank {rank} writes into {run_dir}")


def test_a_worker_killed_by_a_signal_is_named_and_its_unfinished_writes_removed(slurm, tmp_path):
    """What the OOM killer or `kill -9` does to one worker of a two-node job: the summary names the rank, its
    node and the signal, and the temporary file of the write it had begun is gone (srun returned, so every
    task of the job has ended: nothing writes on)."""
    results = tmp_path / "results"
    halves: list[Path] = []

    def kill_rank_1(job: subprocess.Popen) -> None:
        (run_dir,) = (p for p in results.iterdir() if p.is_dir() and not p.name.startswith("."))
        halves.append(killed_mid_write(run_dir / "workers" / "rank1" / "iterations.csv"))
        os.kill(_agent(run_dir, rank=1), signal.SIGKILL)

    proc, s = in_warm_up(slurm, results, kill_rank_1, "--nodes", "2")
    run_dir, half = results / s["run_id"], halves[0]
    assert proc.returncode == 1 and s["status"] == "failed", s.get("error")
    assert "worker rank 1 (node 1) was killed by SIGKILL before writing its results" in s["error"], s["error"]
    assert not half.exists() and not list(run_dir.rglob("*.tmp")), list(run_dir.rglob("*.tmp"))
    assert "RuntimeWarning" not in (run_dir / "log.txt").read_text()  # runpy's, of a module imported twice
    complete(results, s)
    slurm.wait_idle(120)


def test_no_wait_then_gather(slurm, tmp_path):
    results = tmp_path / "results"
    proc = subprocess.run(command(results, MACHINERY, "--no-wait"), cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=slurm.env)
    assert proc.returncode == 0 and "tbdkit gather" in proc.stderr, proc.stderr[-2000:]
    job_id = proc.stderr.split("Slurm job ")[1].split()[0]
    gathered = subprocess.run([TBDKIT, "gather", job_id, "--results", str(results), "--json"], cwd=ROOT,
                              capture_output=True, text=True, timeout=900, env=slurm.env)
    s = json.loads(gathered.stdout)
    assert gathered.returncode == 0 and s["status"] in MEASURED and s["slurm"]["job_id"] == job_id
    complete(results, s)
