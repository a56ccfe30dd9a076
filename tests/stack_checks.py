"""Checks the TensorFlow and MXNet workload tests share (imported by tests/<stack>/, run in that
stack): an adapter on the CPU, a smoke run that learns, a workload file free of timing and logging."""

from __future__ import annotations

import math
import re
from typing import Any

from tbdkit import catalog
from tbdkit.adapters import load

FORBIDDEN = (r"\bimport time\b", r"\blogging\b", r"\bprint\(", r"profiler", r"perf_counter", r"tbdkit")


def adapter(name: str, framework: str, hp: dict[str, Any] | None = None, precision: str = "fp32") -> Any:
    model = catalog.get(name)
    return load(framework, workload=catalog.load_module(model, framework), hp=hp or model.hp("smoke"),
                device="cpu", precision=precision, seed=0)


def assert_learns(a: Any, data: Any, hp: dict[str, Any], batch_size: int, steps: int, factor: float) -> list[float]:
    """`steps` steps through the adapter on one synthetic batch: finite losses, the last below factor x the first."""
    inputs = a.prepare(next(data.synthetic_batches(hp, batch_size, seed=1)))
    losses = [a.loss_value(a.step(inputs)) for _ in range(steps)]
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0] * factor, losses
    return losses


def assert_workload_file_is_clean(name: str, framework: str) -> None:
    source = (catalog.get(name).folder / f"{framework}.py").read_text()
    for forbidden in FORBIDDEN:
        assert not re.search(forbidden, source), forbidden
