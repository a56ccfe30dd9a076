"""The machinery check's data (NumPy only): random features and labels, or one .npz file of them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC, dispatch
from _shared.errors import DataError

Hparams = Mapping[str, Any]


@dataclass(frozen=True)
class Batch:
    """Features (N, features) float32 and labels (N,) int64."""

    features: np.ndarray
    labels: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.features.shape[0])

    @property
    def work(self) -> float:
        return float(self.samples)


def synthetic_batches(hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    rng = np.random.default_rng(seed)
    while True:
        features = rng.standard_normal((batch_size, int(hp["features"])), dtype=np.float32)
        yield Batch(features, rng.integers(0, int(hp["classes"]), batch_size))


def _arrays(path: Path, hp: Hparams) -> tuple[np.ndarray, np.ndarray]:
    """The file's features and labels, checked against the model's sizes (DataError with the fix otherwise)."""
    if not path.is_file():
        raise DataError(f"{path} is not a file: pass an .npz file holding `features` and `labels`.")
    try:
        with np.load(path, allow_pickle=False) as npz:
            features, labels = npz["features"], npz["labels"]
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{path} cannot be read as an .npz of `features` and `labels` ({exc}): write it with "
                        "numpy.savez(path, features=..., labels=...).") from None
    width, classes = int(hp["features"]), int(hp["classes"])
    if features.ndim != 2 or features.shape[1] != width or labels.shape != features.shape[:1] or not len(labels):
        raise DataError(f"{path} holds features {features.shape} and labels {labels.shape}: the model needs "
                        f"features (N, {width}) and labels (N,), N at least 1.")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= classes:
        raise DataError(f"{path}'s labels are not integers from 0 to {classes - 1}: relabel them.")
    return features.astype(np.float32), labels.astype(np.int64)


def file_batches(path: Path, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """The file's samples in a shuffled order each pass, `batch_size` at a time (a pass's tail is dropped)."""
    features, labels = _arrays(path, hp)
    if len(labels) < batch_size:
        raise DataError(f"{path} holds {len(labels)} samples, fewer than the batch of {batch_size}: "
                        "pass a larger file or a smaller --batch-size.")
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(labels))
        for start in range(0, len(order) - batch_size + 1, batch_size):
            take = order[start : start + batch_size]
            yield Batch(features[take], labels[take])


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    return dispatch(source, hp, batch_size, seed, synthetic_batches, file_batches)


def reference_batch(hp: Hparams) -> Batch:
    return next(synthetic_batches(hp, 1, seed=0))


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    if source == SYNTHETIC:
        return "synthetic features and labels: nothing to check"
    features, _ = _arrays(Path(source), hp)
    return f"{source}: {len(features)} samples of {features.shape[1]} features, labels in range"
