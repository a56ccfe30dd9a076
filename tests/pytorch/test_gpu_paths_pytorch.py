"""The PyTorch adapter's GPU paths, checked on the CPU through PyTorch's own interfaces: how DDP's
all-reduces are timed (CUDA events for NCCL, host clock for gloo), cuDNN autotuning decided per
workload, and `--device cuda` failing with the cause."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tbdkit.spec import catalog
from tbdkit.adapters import pytorch as adapter
from tbdkit.adapters.pytorch import CommTimer, cudnn_benchmark, union_seconds


class HostEvent:
    """torch.cuda.Event's timing interface (record, query, synchronize, elapsed_time in ms) on the
    host clock, where CUDA is absent; `clock` decides the time each record() sees."""

    def __init__(self, clock):
        self.clock, self.t = clock, None

    def record(self, stream=None):
        self.t = self.clock()

    def query(self):
        return self.t is not None

    def synchronize(self):
        assert self.t is not None

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


def test_host_event_keeps_torch_cuda_events_interface():
    for name in ("record", "query", "synchronize", "elapsed_time"):
        assert callable(getattr(torch.cuda.Event, name))
    assert "enable_timing" in torch.cuda.Event.__new__.__code__.co_varnames


def test_union_counts_overlapping_buckets_once():
    assert union_seconds([(0.0, 1.0), (0.5, 2.0), (3.0, 3.5)]) == pytest.approx(2.5)
    assert union_seconds([]) == 0.0


@pytest.fixture
def gloo_group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def train_steps(timer: CommTimer, steps: int = 2) -> None:
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)),
                                    bucket_cap_mb=0.001)  # several buckets
    model.register_comm_hook(None, timer.hook())
    timer.reset()
    for _ in range(steps):
        model(torch.randn(16, 64)).sum().backward()


def test_nccl_path_times_all_reduces_with_events_read_against_the_window_origin(gloo_group):
    """The event path inside real DDP: intervals come from the events (here a clock that advances 1 s
    per record), measured from the origin recorded at reset, not from the host clock. gloo runs the
    futures' callbacks on its own thread, so one bucket's end may be recorded after the next bucket's
    start: the intervals may overlap, and the time in communication is their union."""
    ticks = iter(range(1000))
    timer = CommTimer(cuda=True, event=lambda: HostEvent(lambda: float(next(ticks))))
    train_steps(timer)
    assert timer.pending and not timer.intervals
    n = len(timer.pending)
    seconds = timer.seconds
    assert not timer.pending and len(timer.intervals) == n > 1
    # origin at t=0: every start and end is one of the ticks 1..2n, read against the origin
    assert sorted(t for iv in timer.intervals for t in iv) == [float(t) for t in range(1, 2 * n + 1)]
    assert all(end > start for start, end in timer.intervals)
    assert seconds == pytest.approx(union_seconds(timer.intervals))
    assert "CUDA events" in timer.method


def test_gloo_path_keeps_host_clock(gloo_group):
    timer = CommTimer(cuda=False)
    train_steps(timer)
    assert timer.intervals and timer.seconds > 0 and "host clock" in timer.method


def test_a_cpu_worker_joins_with_gloo_and_host_clock_timing(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0").items():
        monkeypatch.setenv(k, v)
    model = catalog.get("minigo")
    a = adapter.PyTorchAdapter(catalog.load_module(model, "pytorch"), model.hp("smoke"), "cpu", "fp32", 0)
    try:
        a.join(1)
        assert a.backend == "gloo" and a.comm is not None and not a.comm.cuda
    finally:
        a.leave()


def test_event_pairs_are_resolved_as_they_pile_up():
    ticks = iter(range(10_000))
    timer = CommTimer(cuda=True, event=lambda: HostEvent(lambda: float(next(ticks))))
    timer.KEEP = 4
    timer.reset()
    for _ in range(10):
        start = timer._event(); start.record()
        end = timer._event(); end.record()
        timer.pending.append((start, end))
        if len(timer.pending) > timer.KEEP:
            timer._resolve(wait=False)
    assert len(timer.pending) <= timer.KEEP and timer.seconds == pytest.approx(10.0)


@pytest.mark.parametrize("name", sorted(catalog.models()))
def test_cudnn_autotuning_follows_the_declared_input_shapes(name):
    hp = catalog.get(name).hp("paper")
    on, why = cudnn_benchmark(hp)
    assert hp["input_shapes"] in ("fixed", "variable", "bucketed") and hp["input_shapes"] in why
    assert on == (hp["input_shapes"] != "variable")
    if name == "deepspeech2":  # pads every batch to its longest utterance
        assert not on


def test_device_cuda_names_why_there_is_no_gpu():
    with pytest.raises(RuntimeError, match="cannot run: .*(no NVIDIA driver|CPU-only|too old)"):
        adapter.resolve_device("cuda")
    assert adapter.resolve_device("auto") == torch.device("cpu")


def test_env_records_the_cudnn_decision_on_cpu():
    model = catalog.get("resnet50")
    a = adapter.PyTorchAdapter(catalog.load_module(model, "pytorch"), model.hp("smoke"), "cpu", "fp32", 0)
    env = a.environment()
    assert env["cudnn_benchmark"] is False and "CPU" in env["cudnn_benchmark_reason"]
    assert a.cudnn_benchmark is True and "fixed" in a.cudnn_benchmark_reason


def test_a_worker_takes_the_gpu_of_its_local_rank_among_its_visible_ones(monkeypatch):
    """A netns node's workers see only that node's GPUs (CUDA_VISIBLE_DEVICES): local rank r takes
    cuda:r of them, and a rank with no GPU of its own is told so (here the GPU count is the hardware's
    answer, given)."""
    monkeypatch.setattr(adapter, "gpu_probe", lambda: (2, None))
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert adapter.resolve_device("cuda") == torch.device("cuda:1")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(RuntimeError, match="sees 2 GPU.*CUDA_VISIBLE_DEVICES='GPU-aaaa,GPU-bbbb'"):
        adapter.resolve_device("cuda")
