"""DiT's input pipeline: class-labelled 32x32x4 VAE latents (precomputed: the VAE is not part of the
run), with the noise and diffusion timestep each sample trains on, drawn here (NumPy, seeded) so that
the same seed gives the same batch on every run.

Synthetic latents are Gaussian with the VAE latents' scaled spread; real ones come from a folder with
latents.npy (N, 4, S, S) and labels.npy (N,).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC, dispatch
from _shared.errors import DataError

Hparams = Mapping[str, Any]
LAYOUT = "latents.npy ((N, 4, S, S) float: the VAE's latents times 0.18215) and labels.npy ((N,) class ids)"


@dataclass(frozen=True, eq=False)
class Batch:
    """(N, C, S, S) float32 latents, (N,) int64 labels and timesteps, (N, C, S, S) float32 noise."""

    latents: np.ndarray
    labels: np.ndarray
    timesteps: np.ndarray
    noise: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.latents.shape[0])

    @property
    def work(self) -> float:
        """Images (latents) in the batch (the throughput unit)."""
        return float(self.samples)

    @property
    def features(self) -> np.ndarray:
        return self.latents


def shape(hp: Hparams) -> tuple[int, int, int]:
    return int(hp["in_channels"]), int(hp["sample_size"]), int(hp["sample_size"])


def with_noise(latents: np.ndarray, labels: np.ndarray, hp: Hparams, rng: np.random.Generator) -> Batch:
    """DiT's train.py: a timestep uniform over the schedule and a standard normal noise per sample."""
    t = rng.integers(0, int(hp["num_train_timesteps"]), size=latents.shape[0]).astype(np.int64)
    noise = rng.standard_normal(latents.shape).astype(np.float32)
    return Batch(latents.astype(np.float32), labels.astype(np.int64), t, noise)


def synthetic_batches(hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    rng = np.random.default_rng(seed)
    while True:
        latents = rng.standard_normal((batch_size, *shape(hp))).astype(np.float32)
        yield with_noise(latents, rng.integers(0, int(hp["num_classes"]), size=batch_size), hp, rng)


def load_latents(root: Path, hp: Hparams) -> tuple[np.ndarray, np.ndarray]:
    if not root.is_dir():
        raise DataError(f"data path {root} is not an existing folder: pass a folder holding {LAYOUT}")
    arrays = []
    for name in ("latents.npy", "labels.npy"):
        if not (root / name).is_file():
            raise DataError(f"{root / name} does not exist: pass a folder holding {LAYOUT}")
        try:
            arrays.append(np.load(root / name, mmap_mode="r"))
        except (ValueError, OSError) as e:
            raise DataError(f"{root / name} is not a NumPy .npy array ({e}): write it with numpy.save") from e
    latents, labels = arrays
    if latents.ndim != 4 or tuple(latents.shape[1:]) != shape(hp) or latents.dtype.kind != "f":
        raise DataError(f"{root / 'latents.npy'} holds {latents.dtype} {tuple(latents.shape)}: it must be float "
                        f"(N, {', '.join(map(str, shape(hp)))}), the VAE's latents of {8 * shape(hp)[1]}x"
                        f"{8 * shape(hp)[1]} crops")
    if labels.shape != (latents.shape[0],) or labels.dtype.kind not in "iu":
        raise DataError(f"{root / 'labels.npy'} holds {labels.dtype} {tuple(labels.shape)}: it must be "
                        f"({latents.shape[0]},) integer class ids, one per latent")
    return latents, labels


def real_batches(root: Path, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    latents, labels = load_latents(root, hp)
    rng = np.random.default_rng(seed)
    while True:
        for start in range(0, len(labels) - batch_size + 1, batch_size):
            order = np.sort(rng.permutation(len(labels))[:batch_size])
            yield with_noise(np.asarray(latents[order]), np.asarray(labels[order]), hp, rng)


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Batches from "synthetic" or a folder of precomputed latents."""
    return dispatch(source, hp, batch_size, seed, synthetic_batches, real_batches)


def reference_batch(hp: Hparams) -> Batch:
    return next(synthetic_batches(hp, 1, 0))


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    """Validate the data source up front (DataError) and describe it in one line (every label read when
    `full`, `tbdkit data prepare`)."""
    s = shape(hp)
    if source == SYNTHETIC:
        return (f"synthetic {s[1]}x{s[2]}x{s[0]} Gaussian latents (the VAE is left out), uniform labels over "
                f"{hp['num_classes']} classes")
    latents, labels = load_latents(Path(source), hp)
    read = labels if full else labels[: 1 << 16]
    if read.size and (int(read.min()) < 0 or int(read.max()) >= int(hp["num_classes"])):
        raise DataError(f"{Path(source) / 'labels.npy'} holds class ids outside 0..{int(hp['num_classes']) - 1}: "
                        f"write ImageNet's class indices")
    how = "all labels read" if full else "the first 65,536 labels read (`tbdkit data prepare` reads them all)"
    return f"precomputed latents at {source}: {len(labels):,} latents {latents.dtype} {s}; {how}"
