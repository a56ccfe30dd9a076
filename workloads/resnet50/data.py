"""ImageNet-1k input pipeline for image classification: synthetic crops and an ImageNet folder reader.

Framework neutral (NumPy; Pillow only when real images are read). Every size comes from the
hyperparameters `hp` (workload.toml's [hparams] merged with a preset); batches carry normalized
RGB crops shaped (N, 3, S, S) float32 and int64 class labels. Inception-v3 reads the same way
(its workload loads this module) with its own crop size.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC, dispatch
from _shared.checks import chosen, exclude_hint, how_checked, image_errors, image_problem
from _shared.errors import DataError

Hparams = Mapping[str, Any]

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
LAYOUT_HINT = "pass the ImageNet train folder whose class subfolders (n01440764, ...) hold the JPEGs"


@dataclass(frozen=True, eq=False)
class Batch:
    """Normalized RGB crops (N, 3, S, S) float32 and their class labels (N,) int64."""

    images: np.ndarray
    labels: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.images.shape[0])

    @property
    def work(self) -> float:
        """Images in the batch (the throughput unit is images/s)."""
        return float(self.samples)


# --------------------------------------------------------------------------------------------
# Synthetic crops


def synthetic_batches(hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches of normalized crops (per-channel mean 0, std 1, as normalized ImageNet) with
    uniform labels, deterministic for `seed`."""
    rng = np.random.default_rng(seed)
    size, classes = int(hp["image_size"]), int(hp["num_classes"])
    while True:
        images = rng.standard_normal((batch_size, 3, size, size), dtype=np.float32)
        yield Batch(images=images, labels=rng.integers(0, classes, batch_size, dtype=np.int64))


def reference_batch(hp: Hparams) -> Batch:
    """The one sample FLOPs per sample are quoted for: a single synthetic crop (seed 0)."""
    return next(synthetic_batches(hp, 1, seed=0))


# --------------------------------------------------------------------------------------------
# ImageNet folder layout: <root>/<class>/<image>


@dataclass(frozen=True)
class ImageFolder:
    """The images below an ImageNet-style root, with labels from the sorted class folder names."""

    root: Path
    classes: list[str]
    items: list[tuple[Path, int]]


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise DataError(f"reading images needs the Pillow package ({e}): pip install pillow") from e
    return Image


def _images_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def scan_folder(root: Path, hp: Hparams) -> ImageFolder:
    """Find the class folders below `root` and their images (DataError if the layout is wrong)."""
    if not root.exists():
        raise DataError(f"data path {root} does not exist: {LAYOUT_HINT}")
    if not root.is_dir():
        raise DataError(f"data path {root} is not a folder: {LAYOUT_HINT}")
    per_class = {d.name: _images_in(d) for d in sorted(root.iterdir()) if d.is_dir()}
    classes = [name for name, files in per_class.items() if files]
    if not classes:
        raise DataError(f"data path {root} holds no class folders with .JPEG/.jpg/.png images: {LAYOUT_HINT}")
    if len(classes) > int(hp["num_classes"]):
        raise DataError(
            f"data path {root} holds {len(classes)} class folders but the model has {hp['num_classes']} classes: "
            f"pass a folder with at most {hp['num_classes']} class folders (ImageNet-1k's train split)"
        )
    items = [(path, label) for label, name in enumerate(classes) for path in per_class[name]]
    return ImageFolder(root=root, classes=classes, items=items)


def _crop_box(rng: np.random.Generator, width: int, height: int, hp: Hparams) -> tuple[int, int, int, int]:
    """An Inception-style random crop (left, top, right, bottom): area and aspect ratio from hp,
    ten tries, else the central square."""
    area = width * height
    lo, hi = np.log(hp["crop_ratio"][0]), np.log(hp["crop_ratio"][1])
    for _ in range(10):
        target = area * rng.uniform(*hp["crop_area"])
        ratio = float(np.exp(rng.uniform(lo, hi)))
        w, h = round(np.sqrt(target * ratio)), round(np.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
            return left, top, left + w, top + h
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    return left, top, left + side, top + side


def normalize(rgb: np.ndarray, hp: Hparams) -> np.ndarray:
    """(S, S, 3) uint8 RGB -> (3, S, S) float32 normalized with hp's pixel mean and std."""
    mean = np.asarray(hp["pixel_mean"], dtype=np.float32)
    std = np.asarray(hp["pixel_std"], dtype=np.float32)
    return ((rgb.astype(np.float32) / 255.0 - mean) / std).transpose(2, 0, 1)


def load_crop(path: Path, rng: np.random.Generator, hp: Hparams) -> np.ndarray:
    """Decode one image and return a random resized, maybe flipped, normalized crop (3, S, S)."""
    image_module = _pillow()
    size = int(hp["image_size"])
    try:
        with image_module.open(path) as img:
            rgb = img.convert("RGB")
    except image_errors(image_module) as e:
        raise DataError(f"{path} cannot be decoded ({e}): {exclude_hint(path, path.parent)}") from e
    box = _crop_box(rng, rgb.width, rgb.height, hp)
    crop = np.asarray(rgb.resize((size, size), image_module.BILINEAR, box=box), dtype=np.uint8)
    if hp["horizontal_flip"] and rng.random() < 0.5:
        crop = crop[:, ::-1]
    return normalize(crop, hp)


def _epoch_indices(n: int, rng: np.random.Generator) -> Iterator[int]:
    while True:
        yield from (int(i) for i in rng.permutation(n))


def folder_batches(root: Path, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches over the images below `root`, reshuffled every epoch by `seed`."""
    folder = scan_folder(Path(root), hp)
    rng = np.random.default_rng(seed)
    indices = _epoch_indices(len(folder.items), rng)
    while True:
        picked = [folder.items[next(indices)] for _ in range(batch_size)]
        images = np.stack([load_crop(path, rng, hp) for path, _ in picked])
        yield Batch(images=images, labels=np.array([label for _, label in picked], dtype=np.int64))


# --------------------------------------------------------------------------------------------
# The converge preset's small real task: handwritten digits


@dataclass(frozen=True, eq=False)
class ConvergenceTask:
    """Endless shuffled training batches, a fixed held-out set, and what they are."""

    train: Iterator[Batch]
    held_out: list[Batch]
    description: str


def _digits(hp: Hparams) -> tuple[np.ndarray, np.ndarray]:
    """The UCI handwritten digits (1,797 scans of 8x8 pixels in 17 grey levels, 10 classes; Alpaydin
    and Kaynak 1998) that scikit-learn bundles, upscaled by pixel repetition to image_size, the grey
    level in all three channels, normalized with hp's pixel mean and std: (N, 3, S, S), (N,)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise DataError(f"the converge task reads the handwritten digits bundled with scikit-learn ({e}): "
                        "pip install scikit-learn into the PyTorch stack (`tbdkit setup pytorch --force`)") from e
    digits = load_digits()
    size = int(hp["image_size"])
    if size % 8:
        raise DataError(f"image_size {size} is not a multiple of the digits' 8 pixels: set a multiple of 8 in the converge preset")
    grey = (digits.images / 16.0).astype(np.float32).repeat(size // 8, axis=1).repeat(size // 8, axis=2)
    mean = np.asarray(hp["pixel_mean"], dtype=np.float32)[None, :, None, None]
    std = np.asarray(hp["pixel_std"], dtype=np.float32)[None, :, None, None]
    return (np.repeat(grey[:, None], 3, axis=1) - mean) / std, digits.target.astype(np.int64)


def convergence_task(source: str, hp: Hparams, batch_size: int, seed: int) -> ConvergenceTask:
    """The digits, a fixed held-out share (hp's held_out_fraction, the same for every seed) and the
    rest in training batches reshuffled every epoch by `seed`."""
    if source != SYNTHETIC:
        raise DataError("the converge preset trains on its bundled digits task, not on a dataset path: leave DATA unset")
    images, labels = _digits(hp)
    order = np.random.default_rng(0).permutation(len(labels))
    n_held = int(round(len(labels) * float(hp["held_out_fraction"])))
    held, train = order[:n_held], order[n_held:]
    held_out = [Batch(images=images[held[i:i + batch_size]], labels=labels[held[i:i + batch_size]])
                for i in range(0, n_held, batch_size)]

    def batches() -> Iterator[Batch]:
        rng = np.random.default_rng(seed)
        indices = _epoch_indices(len(train), rng)
        while True:
            picked = train[[next(indices) for _ in range(batch_size)]]
            yield Batch(images=images[picked], labels=labels[picked])

    size = hp["image_size"]
    return ConvergenceTask(batches(), held_out,
                           f"UCI handwritten digits (scikit-learn's copy): {len(train)} training and {n_held} held-out "
                           f"scans, 8x8 upscaled to {size}x{size}, 10 classes")


def quality(outputs: list[np.ndarray], held_out: list[Batch]) -> float:
    """Top-1 accuracy of the logits (one (N, classes) array per held-out batch)."""
    correct = sum(int((np.argmax(o, axis=1) == b.labels).sum()) for o, b in zip(outputs, held_out))
    return correct / sum(b.samples for b in held_out)


# --------------------------------------------------------------------------------------------
# Entry points


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Batches from "synthetic" or from an ImageNet folder path."""
    return dispatch(source, hp, batch_size, seed, synthetic_batches, folder_batches)


def check_images(paths: list[Path], full: bool) -> int:
    """Decode every image (`full`) or an even sample; a DataError names the first damaged one.
    Returns how many were decoded."""
    image_module = _pillow()
    decoded = chosen(paths, full)
    for path in decoded:
        problem = image_problem(image_module, path)
        if problem is not None:
            raise DataError(f"{path} cannot be decoded ({problem}): {exclude_hint(path, path.parent)}")
    return len(decoded)


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    """Validate the data source up front (DataError) and describe it in one line; decode every
    image when `full` (`tbdkit data prepare`), else an even sample (the check before a run)."""
    size = f"{hp['image_size']}x{hp['image_size']}"
    if source == SYNTHETIC:
        return (f"synthetic ImageNet-like {size} crops (normalized, per-channel mean 0 and std 1), "
                f"uniform labels over {hp['num_classes']} classes")
    folder = scan_folder(Path(source), hp)
    decoded = check_images([path for path, _ in folder.items], full)
    return (f"ImageNet folder at {folder.root}: {len(folder.items)} images in {len(folder.classes)} classes, "
            f"random resized {size} crops; {how_checked(decoded, len(folder.items), 'images')}")
