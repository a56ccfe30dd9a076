"""Checks the TensorFlow and MXNet workload tests share (imported by tests/<stack>/, run in that
stack): an adapter on the CPU, a smoke run that learns, a workload file free of timing and logging,
and NumPy references of the algorithms several frameworks rebuild (torchvision's RoI align)."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

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


def torchvision_roi_align(feats, roi, size, scale, grid):
    """torchvision's roi_align kernel (aligned=False) for one RoI on (C, H, W) features, in NumPy."""
    height, width = feats.shape[1:]

    def bilinear(y, x):
        if y < -1.0 or y > height or x < -1.0 or x > width:
            return np.zeros(feats.shape[0])
        y, x = max(y, 0.0), max(x, 0.0)
        y0, x0 = int(y), int(x)
        if y0 >= height - 1:
            y0 = y1 = height - 1
            y = float(y0)
        else:
            y1 = y0 + 1
        if x0 >= width - 1:
            x0 = x1 = width - 1
            x = float(x0)
        else:
            x1 = x0 + 1
        ly, lx = y - y0, x - x0
        return ((1 - ly) * (1 - lx) * feats[:, y0, x0] + (1 - ly) * lx * feats[:, y0, x1]
                + ly * (1 - lx) * feats[:, y1, x0] + ly * lx * feats[:, y1, x1])

    x1, y1, x2, y2 = roi * scale
    bw, bh = max(x2 - x1, 1.0) / size, max(y2 - y1, 1.0) / size
    gh, gw = grid if grid else (math.ceil(max(y2 - y1, 1.0) / size), math.ceil(max(x2 - x1, 1.0) / size))
    out = np.zeros((feats.shape[0], size, size))
    for py in range(size):
        for px in range(size):
            out[:, py, px] = np.mean([bilinear(y1 + py * bh + (iy + 0.5) * bh / gh, x1 + px * bw + (ix + 0.5) * bw / gw)
                                      for iy in range(gh) for ix in range(gw)], axis=0)
    return out
