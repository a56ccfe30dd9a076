"""The CPU collector's first sample is a real reading, though the sampler's thread takes it and the
agent's thread started the collector (psutil.cpu_percent(interval=None) keeps its reference per thread)."""

from __future__ import annotations

import threading
import time

from tbdkit.agent.collectors.cpu import CpuCollector


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_the_first_sample_on_the_samplers_thread_is_not_zero():
    collector = CpuCollector()
    collector.start()  # on this (the agent's) thread
    busy(0.3)
    got: list[dict] = []
    thread = threading.Thread(target=lambda: got.append(collector.sample()))
    thread.start()
    thread.join()
    # this process kept one core busy for 0.3 s: at least that share of the cores was active
    assert got[0]["cpu_percent"] is not None and got[0]["cpu_percent"] >= 100.0 / collector.cores / 2, got
    busy(0.2)
    assert collector.sample()["cpu_percent"] > 0
