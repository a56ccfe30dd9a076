"""Object detection input pipeline: synthetic VOC-sized images with boxes, and a Pascal VOC reader.

Framework neutral (NumPy; Pillow only when real images are read). A batch is a list of images,
each (3, H, W) float32 in [0, 1] at its own size (the detector resizes and normalizes them), and
one target per image: "boxes" (K, 4) float32 as (x1, y1, x2, y2) in pixels and "labels" (K,)
int64 in 1..num_classes-1 (0 is the background). Mask R-CNN's pipeline builds on this module.
"""

import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC, dispatch
from _shared.checks import chosen, how_checked, image_errors, image_problem
from _shared.errors import DataError

Hparams = Mapping[str, Any]
Target = dict[str, np.ndarray]

VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
               "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
               "train", "tvmonitor")
VOC_HINT = ("pass the VOC2007 folder of VOCdevkit, which holds Annotations/*.xml, JPEGImages/*.jpg "
            "and ImageSets/Main/trainval.txt")


@dataclass(frozen=True, eq=False)
class Batch:
    """Images (3, H, W) float32 in [0, 1] with their targets (boxes, labels and maybe masks)."""

    images: list[np.ndarray]
    targets: list[Target] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return len(self.images)

    @property
    def work(self) -> float:
        """Images in the batch (the throughput unit is images/s)."""
        return float(self.samples)


# --------------------------------------------------------------------------------------------
# Synthetic images and objects


def synthetic_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """An image-like (3, H, W) float32 picture in [0, 1]: a colour, coarse blotches and noise."""
    coarse = rng.normal(0.0, 0.15, (3, height // 16 + 1, width // 16 + 1))
    field_ = np.repeat(np.repeat(coarse, 16, axis=1), 16, axis=2)[:, :height, :width]
    image = rng.uniform(0.25, 0.75, (3, 1, 1)) + field_ + rng.normal(0.0, 0.04, (3, height, width))
    return np.clip(image, 0.0, 1.0).astype(np.float32)


def synthetic_size(rng: np.random.Generator, hp: Hparams) -> tuple[int, int]:
    """(height, width) of a VOC-like image: landscape or portrait, long side hp["image_long_side"]."""
    long_side, short = int(hp["image_long_side"]), int(rng.choice(hp["image_short_sides"]))
    return (short, long_side) if rng.random() < 0.7 else (long_side, short)


def synthetic_boxes(rng: np.random.Generator, height: int, width: int, hp: Hparams) -> np.ndarray:
    """(K, 4) float32 boxes inside the image, each side at least hp["box_min_fraction"] of the image's."""
    k = int(rng.integers(hp["objects_min"], hp["objects_max"] + 1))
    lo = hp["box_min_fraction"]
    w, h = rng.uniform(lo, 1.0, k) * width, rng.uniform(lo, 1.0, k) * height
    x1, y1 = rng.uniform(0, width - w), rng.uniform(0, height - h)
    return np.stack([x1, y1, x1 + w, y1 + h], axis=1).astype(np.float32)


def synthetic_target(rng: np.random.Generator, height: int, width: int, hp: Hparams) -> Target:
    boxes = synthetic_boxes(rng, height, width, hp)
    labels = rng.integers(1, int(hp["num_classes"]), len(boxes), dtype=np.int64)
    return {"boxes": boxes, "labels": labels}


def synthetic_batches(hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches of VOC-sized synthetic images with random boxes, deterministic for `seed`."""
    rng = np.random.default_rng(seed)
    while True:
        sizes = [synthetic_size(rng, hp) for _ in range(batch_size)]
        yield Batch(images=[synthetic_image(rng, h, w) for h, w in sizes],
                    targets=[synthetic_target(rng, h, w, hp) for h, w in sizes])


def reference_batch(hp: Hparams) -> Batch:
    """The one image FLOPs per sample are quoted for: a single synthetic image with its boxes (seed 0)."""
    return next(synthetic_batches(hp, 1, seed=0))


# --------------------------------------------------------------------------------------------
# Images on disk


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise DataError(f"reading images needs the Pillow package ({e}): pip install pillow") from e
    return Image


def read_image(path: Path, exclude: str = "replace it with an intact copy") -> np.ndarray:
    """An image file as (3, H, W) float32 in [0, 1]; a DataError naming it, with `exclude` (how
    to leave it out of the dataset), if it is missing or damaged."""
    image_module = _pillow()
    try:
        with image_module.open(path) as img:
            rgb = np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0
    except image_errors(image_module) as e:
        raise DataError(f"{path} cannot be decoded ({e}): {exclude}") from e
    return rgb.transpose(2, 0, 1).copy()


def check_images(items: Sequence[Any], full: bool) -> int:
    """Decode every annotated image (`full`) or an even sample; a DataError names the first damaged
    one with its `exclude` advice. Returns how many were decoded."""
    image_module = _pillow()
    decoded = chosen(items, full)
    for item in decoded:
        problem = image_problem(image_module, item.path)
        if problem is not None:
            raise DataError(f"{item.path} cannot be decoded ({problem}): {item.exclude}")
    return len(decoded)


def flip(image: np.ndarray, target: Target) -> tuple[np.ndarray, Target]:
    """Mirror an image left-right with its boxes (and masks, if any)."""
    width = image.shape[-1]
    boxes = target["boxes"].copy()
    boxes[:, [0, 2]] = width - target["boxes"][:, [2, 0]]
    flipped = {**target, "boxes": boxes}
    if "masks" in target:
        flipped["masks"] = target["masks"][:, :, ::-1].copy()
    return image[:, :, ::-1].copy(), flipped


def epoch_indices(n: int, rng: np.random.Generator) -> Iterator[int]:
    while True:
        yield from (int(i) for i in rng.permutation(n))


# --------------------------------------------------------------------------------------------
# Pascal VOC


@dataclass(frozen=True)
class VocImage:
    """One annotated image: its file and its non-difficult objects (0-based pixel boxes)."""

    path: Path
    boxes: np.ndarray
    labels: np.ndarray

    @property
    def exclude(self) -> str:
        """How to leave this image out: VOC trains on the ids ImageSets/Main/trainval.txt lists."""
        return (f"remove {self.path.stem} from ImageSets/Main/trainval.txt (or replace the image with an intact "
                f"copy) and check again")


def _voc_size(root: ET.Element, xml: Path) -> tuple[float, float] | None:
    """The image's (width, height) from the annotation's <size>, None when it does not say."""
    try:
        width, height = float(root.findtext("size/width") or 0), float(root.findtext("size/height") or 0)
    except ValueError as e:
        raise DataError(f"{xml} has a non-numeric image <size> ({e}): fix or remove the annotation") from e
    return (width, height) if width > 0 and height > 0 else None


def _check_box(box: list[float], size: tuple[float, float] | None, name: str, xml: Path) -> None:
    """A box must have its corners in order and lie inside the image (0-based pixel indices)."""
    x1, y1, x2, y2 = box
    inside = size is None or (x2 <= size[0] - 1 and y2 <= size[1] - 1)
    if not (0 <= x1 <= x2 and 0 <= y1 <= y2 and inside):
        where = f"its {size[0]:g}x{size[1]:g} image" if size else "its image"
        one_based = ", ".join(f"{v + 1:g}" for v in box)
        raise DataError(f"{xml} has a {name} box ({one_based}) that is not inside {where} with its corners in "
                        f"order: fix the box or remove the object")


def _voc_object(obj: ET.Element, xml: Path) -> tuple[list[float], int] | None:
    name = (obj.findtext("name") or "").strip()
    if name not in VOC_CLASSES:
        raise DataError(f"{xml} has an object of class {name!r}, not one of the 20 VOC classes: fix or remove it")
    if (obj.findtext("difficult") or "0").strip() == "1":
        return None  # as tf-faster-rcnn (TRAIN.USE_DIFF = False)
    bb = obj.find("bndbox")
    try:
        # VOC boxes are 1-based inclusive pixel indices; tf-faster-rcnn subtracts one.
        box = [float(bb.findtext(k)) - 1 for k in ("xmin", "ymin", "xmax", "ymax")]  # type: ignore[union-attr, arg-type]
    except (AttributeError, TypeError, ValueError) as e:
        raise DataError(f"{xml} has an object without a numeric bndbox ({e}): fix or remove the annotation") from e
    return box, VOC_CLASSES.index(name) + 1


def parse_voc_xml(xml: Path, images: Path) -> VocImage:
    """One VOC annotation file and the image it names."""
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError as e:
        raise DataError(f"cannot parse {xml} ({e}): replace or delete the damaged annotation") from e
    objects = [o for o in (_voc_object(obj, xml) for obj in root.iter("object")) if o is not None]
    size = _voc_size(root, xml)
    for box, label in objects:
        _check_box(box, size, VOC_CLASSES[label - 1], xml)
    filename = (root.findtext("filename") or f"{xml.stem}.jpg").strip()
    boxes = np.array([b for b, _ in objects], dtype=np.float32).reshape(-1, 4)
    return VocImage(images / filename, boxes, np.array([c for _, c in objects], dtype=np.int64))


def _voc_ids(root: Path) -> list[str]:
    listing = root / "ImageSets" / "Main" / "trainval.txt"
    if listing.is_file():
        return [line.split()[0] for line in listing.read_text().splitlines() if line.strip()]
    return sorted(p.stem for p in (root / "Annotations").glob("*.xml"))


def scan_voc(root: Path) -> list[VocImage]:
    """The trainval images of a VOC folder that have at least one non-difficult object."""
    if not root.exists():
        raise DataError(f"data path {root} does not exist: {VOC_HINT}")
    if not (root / "Annotations").is_dir() or not (root / "JPEGImages").is_dir():
        raise DataError(f"data path {root} has no Annotations and JPEGImages folders: {VOC_HINT}")
    found = []
    for image_id in _voc_ids(root):
        xml = root / "Annotations" / f"{image_id}.xml"
        if not xml.is_file():
            raise DataError(f"{xml} is listed in ImageSets/Main/trainval.txt but missing: restore it or fix the list")
        item = parse_voc_xml(xml, root / "JPEGImages")
        if not item.path.is_file():
            raise DataError(f"{xml} names the image {item.path}, which is missing: restore it or remove the annotation")
        if len(item.labels):
            found.append(item)
    if not found:
        raise DataError(f"data path {root} holds no annotated images: {VOC_HINT}")
    return found


def annotated_batches(items: Sequence[Any], hp: Hparams, batch_size: int, seed: int,
                      masks: Callable[[Any, np.ndarray], np.ndarray] | None = None) -> Iterator[Batch]:
    """Endless batches over annotated images (each with a path, boxes and labels), reshuffled every epoch
    and flipped at random by `seed`; `masks(item, image)`, when given, adds each target's masks."""
    rng = np.random.default_rng(seed)
    indices = epoch_indices(len(items), rng)
    while True:
        images, targets = [], []
        for _ in range(batch_size):
            item = items[next(indices)]
            image = read_image(item.path, item.exclude)
            target = {"boxes": item.boxes.copy(), "labels": item.labels.copy()}
            if masks is not None:
                target["masks"] = masks(item, image)
            if hp["horizontal_flip"] and rng.random() < 0.5:
                image, target = flip(image, target)
            images.append(image)
            targets.append(target)
        yield Batch(images=images, targets=targets)


def voc_batches(root: Path, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches over a VOC folder, reshuffled every epoch and flipped at random by `seed`."""
    yield from annotated_batches(scan_voc(Path(root)), hp, batch_size, seed)


# --------------------------------------------------------------------------------------------
# Entry points


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Batches from "synthetic" or from a Pascal VOC folder path."""
    return dispatch(source, hp, batch_size, seed, synthetic_batches, voc_batches)


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    """Validate the data source up front (DataError) and describe it in one line; decode every
    image when `full` (`tbdkit data prepare`), else an even sample (the check before a run)."""
    if source == SYNTHETIC:
        return (f"synthetic VOC-sized images ({hp['image_long_side']} px by {hp['image_short_sides']} px) with "
                f"{hp['objects_min']}-{hp['objects_max']} random boxes each over {int(hp['num_classes']) - 1} classes")
    items = scan_voc(Path(source))
    objects = sum(len(i.labels) for i in items)
    decoded = check_images(items, full)
    return (f"Pascal VOC at {source}: {len(items)} images, {objects} objects (difficult ones left out); "
            f"{how_checked(decoded, len(items), 'images')}")
