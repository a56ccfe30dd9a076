"""The batch dispatcher the readers share: a run's `--data` is "synthetic" (the kit's default:
generated batches of the real shapes) or the path of a dataset."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

SYNTHETIC = "synthetic"

B = TypeVar("B")
Hparams = Mapping[str, Any]


def dispatch(source: str, hp: Hparams, batch_size: int, seed: int,
             synthetic: Callable[[Hparams, int, int], Iterator[B]],
             real: Callable[[Path, Hparams, int, int], Iterator[B]]) -> Iterator[B]:
    """`synthetic(hp, batch_size, seed)` for "synthetic", else `real(Path(source), hp, batch_size, seed)`."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if source == SYNTHETIC:
        return synthetic(hp, batch_size, seed)
    return real(Path(source), hp, batch_size, seed)
