"""The Covertype rows: synthetic rows of the real shape, and a reader of UCI's covtype.data.

Framework neutral (NumPy only). A batch is the rows' 54 features, standardized (mean 0, std 1 per
column), as float32, and their class (0-6) as int64.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC, dispatch
from _shared.errors import DataError

Hparams = Mapping[str, Any]
FILES = ("covtype.data", "covtype.data.gz")
LAYOUT_HINT = "pass UCI's covtype.data (or covtype.data.gz), or the folder holding it"


@dataclass(frozen=True, eq=False)
class Batch:
    """Standardized features (N, 54) float32 and classes (N,) int64."""

    features: np.ndarray
    labels: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.features.shape[0])

    @property
    def work(self) -> float:
        """Rows in the batch (the throughput unit is samples/s)."""
        return float(self.samples)


def synthetic_batches(hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches of standardized rows (mean 0, std 1, as the reader makes them) with uniform
    classes, the same for the same `seed`."""
    rng = np.random.default_rng(seed)
    features, classes = int(hp["num_features"]), int(hp["num_classes"])
    while True:
        rows = rng.standard_normal((batch_size, features), dtype=np.float32)
        yield Batch(features=rows, labels=rng.integers(0, classes, batch_size, dtype=np.int64))


def reference_batch(hp: Hparams) -> Batch:
    """The one sample FLOPs per sample are quoted for: one synthetic row (seed 0)."""
    return next(synthetic_batches(hp, 1, seed=0))


def _file(source: Path) -> Path:
    if source.is_dir():
        found = [source / name for name in FILES if (source / name).is_file()]
        if not found:
            raise DataError(f"{source} holds no {' or '.join(FILES)}: {LAYOUT_HINT}")
        return found[0]
    if not source.is_file():
        raise DataError(f"data path {source} does not exist: {LAYOUT_HINT}")
    return source


def _table(path: Path, hp: Hparams) -> np.ndarray:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.float64, ndmin=2)
    except ValueError as exc:
        raise DataError(f"{path} is not comma-separated numbers ({str(exc)[:120]}): {LAYOUT_HINT}") from None
    columns = int(hp["num_features"]) + 1
    if table.shape[1] != columns:
        raise DataError(f"{path} has {table.shape[1]} columns, not {columns} (54 features and the class): {LAYOUT_HINT}")
    labels = table[:, -1]
    if labels.min() < 1 or labels.max() > int(hp["num_classes"]):
        raise DataError(f"{path}'s last column holds classes outside 1-{hp['num_classes']}: {LAYOUT_HINT}")
    return table


def _real(source: Path, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    table = _table(_file(source), hp)
    features = table[:, :-1]
    features = ((features - features.mean(0)) / np.maximum(features.std(0), 1e-6)).astype(np.float32)
    labels = (table[:, -1] - 1).astype(np.int64)
    rng = np.random.default_rng(seed)
    while True:  # epochs of shuffled rows; the last partial batch of an epoch is dropped
        order = rng.permutation(len(labels))
        for start in range(0, len(order) - batch_size + 1, batch_size):
            rows = order[start : start + batch_size]
            yield Batch(features=features[rows], labels=labels[rows])


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    return dispatch(source, hp, batch_size, seed, synthetic_batches, _real)


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    """How the source was checked, in words; DataError with the fix when it cannot be read."""
    if source == SYNTHETIC:
        return "synthetic: standardized random rows of the dataset's 54 features, uniform classes"
    path = _file(Path(source))
    rows = len(_table(path, hp))
    return f"{path}: {rows:,} rows of 54 features and a class, all read"
