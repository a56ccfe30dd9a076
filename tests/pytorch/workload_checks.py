"""Checks every PyTorch workload passes: a few steps on one fixed batch, each math mode, clean files."""

from __future__ import annotations

import math
import re
from typing import Any

import torch

from tbdkit import catalog
from tbdkit.adapters.pytorch import Precision, PyTorchAdapter

CPU = torch.device("cpu")


def modules(name: str) -> tuple[catalog.Model, Any, Any]:
    model = catalog.get(name)
    return model, catalog.load_module(model, "pytorch"), catalog.load_module(model, "data")


def train_on_a_fixed_batch(name: str, batch_size: int, steps: int) -> tuple[Any, list[float]]:
    """The training state after `steps` fp32 training steps on one synthetic smoke batch, and their losses."""
    model, workload, data = modules(name)
    hp = model.hp("smoke")
    torch.manual_seed(0)
    training = workload.build(hp, CPU)
    inputs = workload.to_device(next(data.batches("synthetic", hp, batch_size, seed=1)), CPU)
    precision = Precision("fp32", CPU)
    return training, [float(workload.train_step(training, inputs, precision)) for _ in range(steps)]


def losses_on_a_fixed_batch(name: str, batch_size: int, steps: int) -> list[float]:
    return train_on_a_fixed_batch(name, batch_size, steps)[1]


def assert_learns(losses: list[float], factor: float = 0.99) -> None:
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0] * factor, losses


def step_in_each_math_mode(name: str, batch_size: int, hp: dict | None = None) -> dict[str, float]:
    """One smoke step through the adapter in fp32, tf32 and amp (bf16 autocast on the CPU)."""
    model, workload, data = modules(name)
    hp = hp or model.hp("smoke")
    batch = next(data.batches("synthetic", hp, batch_size, seed=0))
    losses = {}
    try:
        for mode in ("fp32", "tf32", "amp"):
            adapter = PyTorchAdapter(workload, hp, device="cpu", precision=mode, seed=0)
            losses[mode] = adapter.loss_value(adapter.step(adapter.prepare(batch)))
    finally:
        Precision("fp32", CPU)  # leave the process in fp32
    return losses


def assert_workload_file_is_clean(name: str) -> None:
    source = (catalog.get(name).folder / "pytorch.py").read_text()
    for forbidden in (r"\bimport time\b", r"\blogging\b", r"\bprint\(", r"profiler", r"perf_counter", r"tbdkit"):
        assert not re.search(forbidden, source), forbidden


def parameters(module: torch.nn.Module, skip_prefix: str | None = None) -> int:
    return sum(p.numel() for n, p in module.named_parameters() if not (skip_prefix and n.startswith(skip_prefix)))


def converge_briefly(name: str, hp: dict[str, Any], batch_size: int, run_dir: Any) -> dict[str, Any]:
    """A few seconds of the converge preset's loop (hp sets eval_every_s, max_train_s and an
    unreachable target): the curve file has its header and at least three points, the target is
    not reached, and the loop returns the summary's convergence, metrics and data source."""
    from tbdkit.adapters import load
    from tbdkit.agent import converge

    model, workload, data = modules(name)
    adapter = load("pytorch", workload=workload, hp=hp, device="cpu", precision="fp32", seed=0)
    out = converge.train(adapter, data, hp, "synthetic", batch_size, 0, run_dir, lambda: False,
                         model.throughput_unit)
    rows = (run_dir / "convergence.csv").read_text().splitlines()
    assert rows[0] == "wall_s,train_s,step,samples,loss,quality" and len(rows) >= 3, rows
    assert not out["convergence"]["reached"] and out["metrics"]["training_throughput"]["value"] > 0
    return out
