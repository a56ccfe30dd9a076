"""Downsampled ImageNet 64x64 for WGAN-GP: synthetic images and a reader for the folder of PNGs.

Framework neutral (NumPy; Pillow only when real images are read). A batch holds the real images
of one WGAN-GP iteration: hp["critic_iters"] slices of `batch_size` images, shaped
(critic_iters, N, 3, S, S) float32 in [-1, 1] (gan_64x64.py scales 0..255 as 2 * (x / 255 - 0.5)).
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC, dispatch
from _shared.checks import chosen, exclude_hint, how_checked, image_errors
from _shared.errors import DataError

Hparams = Mapping[str, Any]

LAYOUT_HINT = "pass the train_64x64 folder of Downsampled ImageNet 64x64 (image-net.org/small), which holds the PNGs"


@dataclass(frozen=True, eq=False)
class Batch:
    """Real images for one iteration, (critic_iters, N, 3, S, S) float32 in [-1, 1]."""

    images: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.images.shape[0] * self.images.shape[1])

    @property
    def work(self) -> float:
        """Real images the critic trains on in this iteration (the throughput unit is images/s)."""
        return float(self.samples)


def to_unit_range(pixels: np.ndarray) -> np.ndarray:
    """uint8 pixels (..., H, W, 3) -> float32 (..., 3, H, W) in [-1, 1], as gan_64x64.py."""
    x = 2.0 * (pixels.astype(np.float32) / 255.0 - 0.5)
    return np.moveaxis(x, -1, -3)


def _shape(hp: Hparams, batch_size: int) -> tuple[int, int]:
    return int(hp["critic_iters"]), batch_size


# --------------------------------------------------------------------------------------------
# Synthetic images


def synthetic_pixels(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """n image-like uint8 pictures (n, S, S, 3): a colour per image, an 8x8 field of blotches
    upsampled to S, and pixel noise, so pixel values span 0..255 unevenly as photographs do."""
    base = rng.uniform(60, 200, (n, 1, 1, 3))
    field = np.repeat(np.repeat(rng.normal(0, 40, (n, 8, 8, 3)), size // 8, axis=1), size // 8, axis=2)
    noise = rng.normal(0, 12, (n, size, size, 3))
    return np.clip(np.rint(base + field + noise), 0, 255).astype(np.uint8)


def synthetic_batches(hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches of synthetic 64x64 images, deterministic for `seed`."""
    rng = np.random.default_rng(seed)
    slices, n = _shape(hp, batch_size)
    size = int(hp["image_size"])
    while True:
        pixels = synthetic_pixels(rng, slices * n, size).reshape(slices, n, size, size, 3)
        yield Batch(images=to_unit_range(pixels))


def reference_batch(hp: Hparams) -> Batch:
    """The one sample FLOPs per sample are quoted for: one synthetic image (seed 0), generated and
    scored once (the generator's and the critic's forward pass for one image)."""
    return Batch(images=next(synthetic_batches(hp, 1, seed=0)).images[:1])


# --------------------------------------------------------------------------------------------
# Downsampled ImageNet: a folder of PNGs


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise DataError(f"reading images needs the Pillow package ({e}): pip install pillow") from e
    return Image


def find_images(root: Path) -> list[Path]:
    """The PNGs directly in `root`, sorted by name (DataError if there are none)."""
    if not root.exists():
        raise DataError(f"data path {root} does not exist: {LAYOUT_HINT}")
    if not root.is_dir():
        raise DataError(f"data path {root} is not a folder: {LAYOUT_HINT}")
    files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() == ".png")
    if not files:
        raise DataError(f"data path {root} holds no .png images: {LAYOUT_HINT}")
    return files


def read_pixels(path: Path, hp: Hparams) -> np.ndarray:
    """One image as uint8 (S, S, 3); a DataError if it is damaged or not S x S."""
    size = int(hp["image_size"])
    image_module = _pillow()
    try:
        with image_module.open(path) as img:
            rgb = img.convert("RGB")  # decodes every pixel: a truncated file fails here
    except image_errors(image_module) as e:
        raise DataError(f"{path} cannot be decoded ({e}): {exclude_hint(path, path.parent)}") from e
    if rgb.size != (size, size):
        raise DataError(
            f"{path} is {rgb.width}x{rgb.height} but the model trains on {size}x{size} images: {LAYOUT_HINT}"
        )
    return np.asarray(rgb, dtype=np.uint8)


def _epoch_indices(n: int, rng: np.random.Generator) -> Iterator[int]:
    while True:
        yield from (int(i) for i in rng.permutation(n))


def folder_batches(root: Path, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches over the PNGs in `root`, reshuffled every epoch by `seed`."""
    files = find_images(Path(root))
    indices = _epoch_indices(len(files), np.random.default_rng(seed))
    slices, n = _shape(hp, batch_size)
    size = int(hp["image_size"])
    while True:
        pixels = np.stack([read_pixels(files[next(indices)], hp) for _ in range(slices * n)])
        yield Batch(images=to_unit_range(pixels.reshape(slices, n, size, size, 3)))


# --------------------------------------------------------------------------------------------
# Entry points


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Batches from "synthetic" or from a Downsampled ImageNet folder path."""
    return dispatch(source, hp, batch_size, seed, synthetic_batches, folder_batches)


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    """Validate the data source up front (DataError) and describe it in one line; decode every
    PNG when `full` (`tbdkit data prepare`), else an even sample (the check before a run)."""
    size = f"{hp['image_size']}x{hp['image_size']}"
    per_iteration = f"{hp['critic_iters']} critic updates per iteration"
    if source == SYNTHETIC:
        return f"synthetic {size} images scaled to [-1, 1], {per_iteration}"
    files = find_images(Path(source))
    decoded = chosen(files, full)
    for path in decoded:
        read_pixels(path, hp)
    return (f"Downsampled ImageNet at {source}: {len(files)} {size} PNGs, {per_iteration}; "
            f"{how_checked(len(decoded), len(files), 'PNGs')}")
