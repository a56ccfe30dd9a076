"""One process's replicas (--one-process): the batch a step trains, split into one part per replica."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def split(batch: Any, parts: int) -> list[Any]:
    """`batch` (a workload's batch dataclass: its arrays lead with the sample axis) as `parts` equal
    batches, in order; every other field is kept as it is. The agent loads parts x the per-replica batch."""
    n = batch.samples
    if n % parts:
        raise ValueError(f"a batch of {n} samples does not split into {parts} equal parts")
    size = n // parts
    arrays = {
        f.name: getattr(batch, f.name)
        for f in dataclasses.fields(batch)
        if isinstance(getattr(batch, f.name), np.ndarray) and getattr(batch, f.name).shape[:1] == (n,)
    }
    if not arrays:
        raise TypeError(f"{type(batch).__name__} holds no array of its {n} samples to split")
    return [
        dataclasses.replace(batch, **{k: v[i * size : (i + 1) * size] for k, v in arrays.items()}) for i in range(parts)
    ]
