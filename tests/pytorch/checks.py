"""Checks every PyTorch workload must pass, shared by the per-model test files."""

from __future__ import annotations

import math
import re
from typing import Any

import torch

from tbdkit import catalog
from tbdkit.adapters.pytorch import Precision, PyTorchAdapter

CPU = torch.device("cpu")


def smoke_losses(model: str, batch_size: int, steps: int, seed: int = 0) -> list[float]:
    """Losses of `steps` fp32 train steps of the smoke preset on one fixed synthetic batch."""
    m = catalog.get(model)
    workload, data = catalog.load_module(m, "pytorch"), catalog.load_module(m, "data")
    hp = m.hp("smoke")
    torch.manual_seed(seed)
    training = workload.build(hp, CPU)
    inputs = workload.to_device(next(data.batches("synthetic", hp, batch_size, seed + 1)), CPU)
    precision = Precision("fp32", CPU)
    return [float(workload.train_step(training, inputs, precision)) for _ in range(steps)]


def assert_loss_decreases(losses: list[float], factor: float = 0.99) -> None:
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0] * factor, losses


def amp_step_loss(model: str, batch_size: int) -> float:
    """One bf16-autocast step through the adapter on the CPU; leaves the process in fp32."""
    m = catalog.get(model)
    workload, data = catalog.load_module(m, "pytorch"), catalog.load_module(m, "data")
    hp = m.hp("smoke")
    try:
        adapter = PyTorchAdapter(workload, hp, device="cpu", precision="amp", seed=0)
        batch = next(data.batches("synthetic", hp, batch_size, 0))
        return adapter.loss_value(adapter.step(adapter.prepare(batch)))
    finally:
        Precision("fp32", CPU)


def assert_no_timing_logging_or_profiling(model: str) -> None:
    source: Any = (catalog.get(model).folder / "pytorch.py").read_text()
    for forbidden in (r"\bimport time\b", r"\blogging\b", r"\bprint\(", r"profiler", r"perf_counter", r"tbdkit"):
        assert not re.search(forbidden, source), forbidden
