"""Collectors run beside the training loop, only inside the sample window, off the hot path.

Each has start() at the window's start, sample() called from one background thread every
`interval` seconds (its columns go to samples.csv), and stop() returning summary metrics.
A collector that cannot measure here returns metrics with value null and the reason.

A new collector is a module here and one line in `default_collectors` below (docs/architecture.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from tbdkit.agent.collectors.cpu import CpuCollector
from tbdkit.agent.collectors.energy import EnergyCollector
from tbdkit.agent.collectors.gpm import GpmCollector
from tbdkit.agent.collectors.gpu_state import GpuStateCollector
from tbdkit.agent.collectors.neighbours import NeighbourCollector
from tbdkit.agent.collectors.nvml import NvmlCollector


class Collector(Protocol):
    name: str

    def start(self) -> None: ...
    def sample(self) -> dict[str, Any]: ...
    def stop(self) -> dict[str, dict[str, Any]]: ...


class Sampler:
    """One daemon thread that polls every collector's sample() at a fixed interval, over one window.

    The thread starts when the Sampler is made and waits for start(). The agent makes its Sampler
    before --memory-limit-mb's address-space cap: a thread that fails to allocate its own state before
    it has started (MemoryError in its bootstrap) leaves CPython's Thread.start() waiting for it forever,
    and so would leave the run hanging at its window's start instead of ending it as out of memory.
    """

    def __init__(
        self, collectors: list[Collector], interval_s: float, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.collectors = collectors
        self.clock = clock  # samples.csv's t_s: the real time.perf_counter unless a test hands it another
        self.interval_s = interval_s
        self.rows: list[dict[str, Any]] = []
        self.errors: dict[str, str] = {}  # collector name -> its first sample() error
        self._go = threading.Event()
        self._stop = threading.Event()
        self._t0 = 0.0
        self._thread = threading.Thread(target=self._run, name="tbdkit-sampler", daemon=True)
        self._thread.start()

    def start(self) -> None:
        if self._go.is_set():
            raise RuntimeError("a Sampler samples one window: make another")
        for c in self.collectors:
            c.start()
        self._t0 = self.clock()
        self._go.set()

    @property
    def t0(self) -> float:
        """The sampler's clock when sampling started: samples.csv's t_s counts from it."""
        return self._t0

    def _run(self) -> None:
        self._go.wait()
        while not self._stop.wait(self.interval_s):
            row: dict[str, Any] = {"t_s": round(self.clock() - self._t0, 4)}
            for c in self.collectors:
                try:
                    row.update(c.sample())
                except Exception as exc:  # one collector's failure never stops the others' sampling
                    self.errors.setdefault(c.name, f"{type(exc).__name__}: {exc}")
            self.rows.append(row)

    def stop(self) -> dict[str, dict[str, Any]]:
        self._stop.set()
        self._go.set()
        self._thread.join()
        metrics: dict[str, dict[str, Any]] = {}
        for c in self.collectors:
            metrics.update(c.stop())
        return metrics


def default_collectors(adapter: Any) -> list[Collector]:
    """The GPU collectors find the framework's GPU by the UUID / PCI bus id its adapter reports
    (device_properties in env.json), never by the CUDA index alone (tbdkit.env.nvml)."""
    props = (adapter.environment().get("device_properties") or {}) if adapter.cuda_index is not None else {}
    uuid, pci = props.get("uuid"), props.get("pci_bus_id")
    # Energy first: its window opens first and closes first, nearest the sample window's own ends.
    return [
        EnergyCollector(adapter.cuda_index, uuid, pci),
        CpuCollector(),
        NvmlCollector(adapter.cuda_index, uuid, pci),
        GpmCollector(adapter.cuda_index, uuid, pci),
        NeighbourCollector(),
        GpuStateCollector(adapter.cuda_index, uuid, pci),
    ]
