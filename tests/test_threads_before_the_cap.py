"""The threads a run's window needs (the collectors' sampling thread, a real dataset's reading thread)
are started before a memory cap, never inside it.

Under --memory-limit-mb the agent caps its address space. A thread that then fails to allocate its own
state before it has started (MemoryError in its bootstrap) leaves CPython's Thread.start() waiting for
it forever: a max-batch probe hung at its window's start instead of ending as out of memory. These
checks make exactly that failure with the real threading module (a new thread's bootstrap raises
MemoryError once the cap is on) and need the run to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tbdkit.env import stacks
from tbdkit.core.errors import UserError

ROOT = Path(__file__).parents[1]

NO_NEW_THREADS = r"""
import threading

def no_room(self):
    raise MemoryError("no room for a new thread's state under the address-space cap")

def cap_threads():
    threading.Thread._bootstrap_inner = no_room
"""

SAMPLER = NO_NEW_THREADS + r"""
import time
from tbdkit.agent.collectors import Sampler

class Ticks:
    name = "ticks"
    def start(self): pass
    def sample(self): return {"tick": 1}
    def stop(self): return {"ticks": {"value": 1}}

sampler = Sampler([Ticks()], 0.01)
cap_threads()
sampler.start()
time.sleep(0.2)
print(len(sampler.rows), sampler.stop())
"""

PREFETCHER = NO_NEW_THREADS + r"""
from tbdkit.agent.loop import Prefetcher

opened = []
def open_batches():
    opened.append(True)
    return iter(range(100))

prefetcher = Prefetcher(open_batches)
assert not opened  # the dataset is opened at the first batch asked for (under the cap), not before
cap_threads()
print([next(prefetcher) for _ in range(5)], len(opened))
"""

AGENT = NO_NEW_THREADS + r"""
import sys
from pathlib import Path
from tbdkit.spec import run_spec as specs
from tbdkit.agent import run

limit = run.limit_memory
def limit_and_cap_threads(extra_mb):
    limit(extra_mb)
    cap_threads()
run.limit_memory = limit_and_cap_threads

spec = specs.build(model="deepspeech2", framework="pytorch", preset="smoke", device="cpu", batch_size=2,
                   memory_limit_mb=8000, measure={"max_warmup_s": 2, "max_measure_s": 2})
run_dir = Path(sys.argv[1])
run_dir.mkdir(parents=True)
sys.exit(run.execute(spec, run_dir))
"""


def test_a_sampler_started_when_no_thread_can_start_still_samples():
    proc = subprocess.run([sys.executable, "-c", SAMPLER], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows, metrics = proc.stdout.split(" ", 1)
    assert int(rows) >= 3 and "ticks" in metrics


def test_a_prefetcher_made_before_the_cap_reads_the_data_under_it():
    proc = subprocess.run([sys.executable, "-c", PREFETCHER], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[0, 1, 2, 3, 4] 1"


def test_a_capped_run_where_no_thread_can_start_measures_its_window(tmp_path):
    try:
        python = stacks.require("pytorch")
    except UserError as exc:  # the stack is not installed here
        pytest.skip(str(exc))
    run_dir = tmp_path / "run"
    try:
        proc = subprocess.run([str(python), "-c", AGENT, str(run_dir)], capture_output=True, text=True, timeout=300,
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("the capped run hung: a thread was started inside the memory cap")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] in {"ok", "disturbed"} and summary["metrics"]["throughput"]["value"] > 0
    assert summary["metrics"]["cpu_utilization"]["value"] is not None  # the sampler's collectors measured


def test_a_capped_bench_reads_a_real_dataset_through_the_prefetcher(tmp_path):
    """A real dataset (three ImageNet class folders of JPEGs) under --memory-limit-mb: its reading
    thread was made before the cap, the reading ran under it, and the run measured its window."""
    from PIL import Image

    from model_checks import tbdkit
    from run_invariants import assert_run_holds

    train = tmp_path / "imagenet" / "train"
    for k, (wnid, rgb) in enumerate({"n01440764": (220, 30, 30), "n01443537": (30, 200, 40)}.items()):
        (train / wnid).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (120 + 20 * i, 90), rgb).save(train / wnid / f"{wnid}_{i + k}.JPEG")
    results = tmp_path / "results"
    proc = tbdkit("bench", "--model", "resnet50", "--framework", "pytorch", "--preset", "smoke", "--device", "cpu",
                  "--batch", "2", "--max-warmup-s", "2", "--max-measure-s", "3", "--memory-limit-mb", "4000",
                  "--data", str(train), "--results", str(results), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (summary,) = json.loads(proc.stdout)
    assert_run_holds(results / summary["run_id"], indexed=True)
    assert summary["status"] in {"ok", "disturbed"} and summary["metrics"]["throughput"]["value"] > 0
    assert str(train) in json.dumps(summary["data_source"]), summary["data_source"]
