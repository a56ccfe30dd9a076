"""Runs that know when they were disturbed: the CPU budget (tbdkit.env.cpus), the foreign-load collector,
the rule that flags a window, and `disturbed` through the report and sweeps. Fast, the real run beside a
busy-loop neighbour too (the machinery check's stack; marked slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tbdkit.env import cpus
from tbdkit.spec import launchers
from tbdkit.agent import disturbance
from tbdkit.agent.collectors.neighbours import NeighbourCollector
from tbdkit.report import runs as runs_mod
from tbdkit.report.build import build_report
from tbdkit.results import summary as summaries
from tbdkit.results.index import Index
from tbdkit.bench.sweep import SweepRun
from report_fixtures import make_run
from test_sweep_logic import FakeRunner, sweep_spec

SPIN = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"

# ---------------------------------------------------------------- the CPU budget


def test_the_budget_splits_cores_between_data_loading_and_the_framework():
    b = cpus.plan(None, pin=False, data_workers=1, mask=[0, 1, 2, 3], quota={"cores": None})
    assert (b.cpus, b.intra_op, b.inter_op, b.data_workers, b.pinned) == (4, 3, 1, 1, None)
    # the cgroup quota caps the affinity mask; --cpus and several workers split it; --pin takes the first cores
    assert cpus.plan(None, False, 0, mask=[0, 1, 2, 3], quota={"cores": 2.5}).cpus == 2
    two = cpus.plan(4, True, 0, workers_here=2, mask=[4, 5, 6, 7], quota={"cores": None})
    assert (two.cpus, two.intra_op, two.pinned, two.source) == (2, 2, [4, 5], "--cpus, split over 2 workers")
    assert cpus.plan(1, False, 1, mask=[0], quota={"cores": None}).intra_op == 1  # never zero threads
    assert cpus.thread_env(b) == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "MXNET_CPU_WORKER_NTHREADS": "1",
                                  "MXNET_CPU_PRIORITY_NTHREADS": "1"}


def test_cgroup_quota_v2_and_v1(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cpus.cgroup_quota(tmp_path)["cores"] == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpus.cgroup_quota(tmp_path)["cores"] is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpus.cgroup_quota(v1)["cores"] == 3.0
    assert cpus.cgroup_quota(tmp_path / "none")["reason"].startswith("no cgroup CPU quota file")


def test_more_cpus_than_the_machine_gives_is_one_sentence(tmp_path):
    too_many = str(len(os.sched_getaffinity(0)) + 1)
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "bench", "--model", "deepspeech2", "--framework", "pytorch",
                           "--device", "cpu", "--cpus", too_many, "--results", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    assert f"--cpus {too_many} asks for more cores than this process may use" in proc.stderr
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------- the rule


def series(foreign: float, **more: dict) -> dict:
    return {"foreign_cpu": {"value": foreign, "unit": "cores", "method": "test", "cores": [0, 1]}, **more}


@pytest.mark.parametrize("foreign, disturbed", [(0.0, False), (0.04, False), (0.25, False), (0.26, True), (1.0, True)])
def test_foreign_cpu_above_a_quarter_core_disturbs(foreign, disturbed):
    why = disturbance.reasons(series(foreign))
    assert bool(why) is disturbed
    if disturbed:
        assert why == [f"foreign CPU load: other processes used {foreign:.2f} core-equivalents of the run's 2 core(s) "
                       "(limit 0.25)"]
    assert disturbance.reasons(series(foreign), limit=2.0) == []  # a stated, larger limit (MeasurePolicy)


def test_missing_measurements_never_disturb():
    gap = {"value": None, "unit": "cores", "method": "test", "reason": "psutil failed"}
    assert disturbance.reasons({"foreign_cpu": gap}) == [] and disturbance.reasons({}) == []


def test_the_run_own_children_are_not_foreign():
    """A child of the run that uses 0.6 s of CPU (however long a busy machine makes that take) is the
    run's CPU time, not a neighbour's: without it, the run's own time would be this test's polling only."""
    burn = "import time\nwhile time.process_time() < 0.6: pass\n"
    c = NeighbourCollector()
    start = time.perf_counter()
    c.start()
    child = subprocess.Popen([sys.executable, "-c", burn])
    while child.poll() is None:
        c.sample()
        time.sleep(0.2)
    child.wait()  # reaped: its time is now in this process's children_user
    m = c.stop()["foreign_cpu"]
    wall = time.perf_counter() - start
    assert m["unit"] == "cores" and m["value"] is not None and m["processes_of_run"] >= 2
    assert m["run_cores_busy"] * wall >= 0.6 * 0.95  # the child's CPU time was counted as the run's



def test_interrupt_time_is_reported_not_counted_as_a_neighbour(monkeypatch):
    """irq+softirq is charged to no process (a data-parallel run's own packets make most of it):
    psutil's per-CPU times with only softirq growing, 0.5 core-seconds a read, give no foreign load."""
    real = psutil.cpu_times(percpu=True)
    reads = iter(range(10_000))

    def cpu_times(percpu: bool = False):
        k = next(reads)
        return [t._replace(softirq=t.softirq + 0.5 * k) for t in real]

    monkeypatch.setattr(psutil, "cpu_times", cpu_times)
    c = NeighbourCollector(cores=[0])
    c.start()
    time.sleep(0.2)
    m = c.stop()["foreign_cpu"]
    assert m["value"] == 0.0
    assert m["interrupt_cores"] > 1.0  # 0.5 s of softirq between two reads about 0.2 s apart

# ---------------------------------------------------------------- status, report, sweeps


def _disturb(run: Path, reasons: list[str]) -> None:
    s = json.loads((run / "summary.json").read_text())
    s.update(status="disturbed", disturbed_reasons=reasons)
    (run / "summary.json").write_text(json.dumps(s))
    Index(run.parent).add(run)


def test_the_summary_model_keeps_the_reasons(tmp_path):
    run = make_run(tmp_path, "resnet50", "pytorch", 2, 10.0)
    _disturb(run, ["foreign CPU load: other processes used 1.00 core-equivalents"])
    assert summaries.read(run)["disturbed_reasons"] == ["foreign CPU load: other processes used 1.00 core-equivalents"]
    s = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**s, "disturbed_reasons": "not a list"}))
    with pytest.raises(summaries.Unreadable):
        summaries.read(run)


def test_the_report_draws_disturbed_runs_and_leaves_them_out_of_claims(tmp_path):
    results = tmp_path / "results"
    gpu = dict(device="cuda:0", device_name="NVIDIA H100", peak_flops=67e12)
    for batch, thr in ((2, 10.0), (4, 18.0)):
        make_run(results, "resnet50", "pytorch", batch, thr, **gpu)
    dropped = make_run(results, "resnet50", "pytorch", 8, 5.0, **gpu)  # a drop, but only because of a neighbour
    _disturb(dropped, ["foreign CPU load: other processes used 1.80 core-equivalents of the run's 2 core(s) (limit 0.25)"])
    loaded = runs_mod.load(results)
    assert len(loaded) == 3 and [r.disturbed for r in loaded].count(True) == 1
    assert len(runs_mod.for_claims(loaded)) == 2 and len(runs_mod.for_claims(loaded, include_disturbed=True)) == 3
    html = build_report(results, tmp_path / "out").read_text()
    md = (tmp_path / "out" / "report.md").read_text()
    assert "1 run(s) disturbed" in md and "left out of the claim checks" in md and "1 run(s) disturbed" in html
    assert "**1. " in md and "— *holds*" in md.split("**1. ")[1].split("\n")[0]
    assert "disturbed: foreign CPU load" in md
    build_report(results, tmp_path / "all", include_disturbed=True)
    kept = (tmp_path / "all" / "report.md").read_text()
    assert "included in the claim checks" in kept and "— *does not hold*" in kept.split("**1. ")[1].split("\n")[0]


def test_a_sweep_reruns_a_disturbed_point_and_says_so(tmp_path):
    told: list[tuple[str, int, int, list[str]]] = []

    class Observer:
        def point_started(self, point, batch_size): ...
        def point_finished(self, point, status): ...
        def probe_started(self, framework, precision, batch_size): ...
        def point_retried(self, point, attempt, of, reasons):
            told.append((point.key, attempt, of, reasons))

    def plan(spec, n, probe):
        return ("disturbed", 3.0) if n == 1 else ("ok", 10.0)

    class Runner(FakeRunner):
        def __call__(self, spec, where, probe):
            result = super().__call__(spec, where, probe)
            if result.status == "disturbed":
                result.summary["disturbed_reasons"] = ["foreign CPU load: test"]
            return result

    spec = sweep_spec(tmp_path, batches=[2], retry_disturbed=2)
    runner = Runner(plan)
    state = SweepRun(spec, runner, Observer()).run()
    point = state["points"]["pytorch/fp32/b2/r0"]
    assert point["status"] == "ok" and point["retried_disturbed"] == 1
    assert [a["status"] for a in point["attempts"]] == ["disturbed", "ok"]
    assert point["attempts"][0]["disturbed_reasons"] == ["foreign CPU load: test"]
    assert told == [("pytorch/fp32/b2/r0", 1, 2, ["foreign CPU load: test"])]
    # without --retry-disturbed a disturbed point is kept (its numbers are real) and not re-run on resume
    kept = SweepRun(sweep_spec(tmp_path / "b", batches=[2]), Runner(lambda s, n, p: ("disturbed", 3.0))).run()
    assert kept["points"]["pytorch/fp32/b2/r0"]["status"] == "disturbed"
    again = Runner(lambda s, n, p: ("ok", 9.0))
    SweepRun(sweep_spec(tmp_path / "b", batches=[2]), again).run()
    assert again.calls == []
    assert sweep_spec(tmp_path, retry_disturbed=3).sweep_id() == sweep_spec(tmp_path).sweep_id()


# ---------------------------------------------------------------- a real run beside a neighbour


def test_a_busy_loop_neighbour_flips_a_real_run_to_disturbed(tmp_path):
    """A process spinning beside a real run (outside its process tree) is foreign load: the run
    ends `disturbed`, its numbers kept, with the foreign share as the reason; env.json has its threads."""
    neighbour = subprocess.Popen([sys.executable, "-c", SPIN.format(s=600)])
    try:
        # the machinery check's stack (NumPy, in the kit's own environment): what is disturbed is the run, not a
        # framework; its window is held near its 2 s cap (a 1e-4 CI is not reached) so the collector samples it
        proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "bench", "--model", "mlp_numpy", "--framework",
                               "numpy", "--preset", "smoke", "--device", "cpu", "--max-warmup-s", "1",
                               "--max-measure-s", "2", "--target-ci", "0.0001", "--cpus", "1",
                               "--results", str(tmp_path)], capture_output=True, text=True, timeout=600)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert proc.returncode == 0, proc.stdout + proc.stderr  # disturbed is a finished run, not a failure
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    foreign = summary["metrics"]["foreign_cpu"]
    assert summary["status"] == "disturbed", summary
    assert foreign["value"] >= 0.5 and foreign["unit"] == "cores"  # the neighbour: at least half a core
    assert any(r.startswith("foreign CPU load: other processes used") for r in summary["disturbed_reasons"])
    assert summary["metrics"]["throughput"]["value"] > 0  # the numbers are kept
    # the warm-up saw the neighbour too: measured over it alone, with the window's limit beside it
    warm = summary["warmup"]["foreign_cpu"]
    assert warm["value"] >= 0.5 and warm["unit"] == "cores" and warm["limit"] == 0.25, warm
    assert "over the warm-up" in warm["method"] and "over the sample window" in foreign["method"]
    env = json.loads((run / "env.json").read_text())
    assert env["cpu_budget"]["cpus"] == 1 and env["cpu_budget"]["thread_env"]["OMP_NUM_THREADS"] == "1"
    # the budget reached the adapter and the environment its BLAS loaded with (each framework's own thread pools
    # follow the budget: tests/thread_checks.py, in every stack's suite)
    assert env["framework"]["threads"]["requested"]["intra_op"] == 1 and env["framework"]["omp_num_threads"] == "1"
    assert env["launch_env"]["OMP_NUM_THREADS"] == "1"
    assert "foreign_cpu_cores" in (run / "samples.csv").read_text().splitlines()[0]


def test_pin_keeps_the_process_on_its_first_cores():
    """--pin: the agent's process (and the threads it starts afterwards) run on the budget's cores only."""
    script = ("import os, json\nfrom tbdkit.env import cpus\nb = cpus.plan(1, True, 0)\n"
              "print(json.dumps([b.pinned, cpus.pin(b), sorted(os.sched_getaffinity(0))]))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    first = sorted(os.sched_getaffinity(0))[:1]
    assert json.loads(proc.stdout) == [first, first, first], proc.stderr


def test_the_launcher_tree_is_the_run_when_it_is_an_ancestor(monkeypatch):
    """A data-parallel job's other workers are the launcher's descendants: the run's, not neighbours."""
    from tbdkit.agent.collectors import neighbours

    monkeypatch.setenv(neighbours.LAUNCHER_PID, str(os.getppid()))
    assert neighbours.run_root().pid == os.getppid()
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert sibling.pid in {p.pid for p in neighbours.tree(neighbours.run_root())}
    finally:
        sibling.kill()
        sibling.wait()
    monkeypatch.setenv(neighbours.LAUNCHER_PID, str(sibling.pid))  # not an ancestor: the agent is the root
    assert neighbours.run_root().pid == os.getpid()


# The agent of a launcher that is killed once it has made the collector: it waits for the word on stdin,
# then samples a window and prints the collector's metric.
ORPHANED_AGENT = """
import json, sys, time
from tbdkit.agent.collectors.neighbours import NeighbourCollector
c = NeighbourCollector(cores=[0])
print(c.proc.pid, flush=True)
sys.stdin.readline()
c.start()
t = time.process_time()
while time.process_time() - t < 0.3: pass
c.sample()
print(json.dumps(c.stop()["foreign_cpu"]), flush=True)
"""
LAUNCHER = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1]], env={**os.environ, "TBDKIT_LAUNCHER_PID": str(os.getpid())})
time.sleep(60)
"""


@pytest.mark.parametrize("reaped", [True, False], ids=["launcher-reaped", "launcher-a-zombie"])
def test_the_run_tree_falls_back_to_the_agent_when_the_launcher_is_killed(reaped):
    """The launcher (a real ancestor, named in TBDKIT_LAUNCHER_PID) is killed after the collector took it for
    the root and before the window starts: the window is measured from the agent's tree, and says so (it
    was NoSuchProcess and a failed run). Reaped or a zombie, the killed launcher's tree no longer holds the agent."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, ORPHANED_AGENT], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    assert launcher.stdout is not None and launcher.stdin is not None
    try:
        assert launcher.stdout.readline().strip() == str(launcher.pid)  # the launcher is the run's root
        launcher.kill()
        if reaped:
            launcher.wait()
        else:
            deadline = time.monotonic() + 10
            while psutil.Process(launcher.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
                time.sleep(0.01)
        launcher.stdin.write("go\n")
        launcher.stdin.flush()
        line = launcher.stdout.readline()
    finally:
        launcher.stdin.close()  # an agent still waiting reads the end and goes on
        launcher.kill()
        launcher.wait()
    m = json.loads(line)  # an empty line (the agent's traceback on stderr) fails here
    assert m["value"] is not None and m["unit"] == "cores", m
    assert m["note"] == (f"the launcher (pid {launcher.pid}) ended during the window: the run's tree grew from the "
                         "agent after it")
    assert m["run_cores_busy"] > 0  # the agent's own 0.3 s of CPU is the run's, not a neighbour's


def test_a_disturbed_worker_of_a_job_is_not_a_failed_one(tmp_path):
    """A data-parallel job whose rank 1 was disturbed finished: the launcher keeps rank 0's summary."""
    from tbdkit.launch.workers import name_failed_workers
    from tbdkit.spec.run_spec import build

    spec = build(model="deepspeech2", framework="pytorch", batch_size=2, device="cpu", gpus_per_node=2)
    own = {"status": "ok", "model": "deepspeech2", "framework": "pytorch", "worker": "rank 0 of 2"}
    (tmp_path / "summary.json").write_text(json.dumps(own))
    (tmp_path / "workers" / "rank1").mkdir(parents=True)
    (tmp_path / "workers" / "rank1" / "summary.json").write_text(json.dumps(
        {**own, "status": "disturbed", "worker": "rank 1 of 2", "disturbed_reasons": ["foreign CPU load: test"]}))
    assert name_failed_workers(tmp_path, spec, 0, own) == ("ok", own)


def test_the_netns_launchers_nodes_share_this_machines_cores():
    """Several namespaces are one machine: each worker of a 2-node netns job gets half the cores, as the
    launcher's OMP_NUM_THREADS says (two workers of 2 threads each on 2 cores made the link's cost vanish
    under oversubscription); a node of a real cluster splits only among its own workers."""
    assert launchers.workers_here(2, 1, "netns") == 2
    assert launchers.workers_here(8, 4, "native") == 4
    assert launchers.workers_here(1, 1, "netns") == 1
    two = cpus.plan(None, False, 0, workers_here=launchers.workers_here(2, 1, "netns"), mask=[0, 1], quota={"cores": None})
    assert (two.cpus, two.intra_op) == (1, 1)
