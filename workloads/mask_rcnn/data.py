"""Instance segmentation input pipeline: synthetic COCO-sized images with boxes and masks, and a
COCO-format JSON reader.

Framework neutral (NumPy; Pillow when real images are read or polygons drawn). Batches are
Faster R-CNN's (that workload's data module is loaded here), each target also holding "masks":
(K, H, W) uint8, one per box, when hp["instance_masks"] is true (EfficientDet reads boxes only).
Labels are COCO category ids (1..90), as torchvision's detectors and effdet use.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC, dispatch
from _shared.checks import how_checked, read_json
from _shared.sibling import load

_detection = load("faster_rcnn", "data")
Batch = _detection.Batch
DataError = _detection.DataError
Hparams = Mapping[str, Any]
Target = dict[str, np.ndarray]

COCO_HINT = ("pass the COCO folder that holds annotations/instances_train2017.json and the train2017 "
             "folder of images it names")


# --------------------------------------------------------------------------------------------
# Synthetic objects with masks


def ellipse_masks(boxes: np.ndarray, height: int, width: int) -> np.ndarray:
    """(K, H, W) uint8 masks: the ellipse inscribed in each box."""
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32) + 0.5
    masks = np.zeros((len(boxes), height, width), dtype=np.uint8)
    for k, (x1, y1, x2, y2) in enumerate(boxes):
        cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, max((x2 - x1) / 2, 0.5), max((y2 - y1) / 2, 0.5)
        masks[k] = ((xs - cx) / rx) ** 2 + ((ys - cy) / ry) ** 2 <= 1.0
    return masks


def synthetic_batches(hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches of COCO-sized images with random boxes and their masks, deterministic for `seed`:
    Faster R-CNN's synthetic batches (the same draws) with an ellipse mask per box."""
    for batch in _detection.synthetic_batches(hp, batch_size, seed):
        if hp["instance_masks"]:
            for image, target in zip(batch.images, batch.targets):
                target["masks"] = ellipse_masks(target["boxes"], image.shape[1], image.shape[2])
        yield batch


def reference_batch(hp: Hparams) -> Batch:
    """The one image FLOPs per sample are quoted for: a single synthetic image with its boxes and masks (seed 0)."""
    return next(synthetic_batches(hp, 1, seed=0))


# --------------------------------------------------------------------------------------------
# COCO-format JSON


@dataclass(frozen=True)
class CocoImage:
    """One image and its usable objects: boxes (x1, y1, x2, y2), category ids and polygons."""

    path: Path
    height: int
    width: int
    boxes: np.ndarray
    labels: np.ndarray
    polygons: list[list[list[float]]]
    exclude: str = "replace it with an intact copy"  # how to leave the image out of the dataset


def find_annotations(root: Path) -> tuple[Path, Path]:
    """The instances JSON below `root`/annotations (a train split first) and its image folder."""
    if not root.exists():
        raise DataError(f"data path {root} does not exist: {COCO_HINT}")
    candidates = sorted((root / "annotations").glob("instances_*.json"), key=lambda p: ("train" not in p.name, p.name))
    if not candidates:
        raise DataError(f"data path {root} has no annotations/instances_*.json: {COCO_HINT}")
    json_path = candidates[0]
    images = root / json_path.stem.removeprefix("instances_")
    if not images.is_dir():
        raise DataError(f"{json_path} names the split {images.name}, but {images} is not a folder: {COCO_HINT}")
    return json_path, images


def _usable(ann: Mapping[str, Any]) -> bool:
    """Objects torchvision's reference trains on: not a crowd, polygons, a box of positive size."""
    x, y, w, h = ann.get("bbox", (0, 0, 0, 0))
    return not ann.get("iscrowd", 0) and isinstance(ann.get("segmentation"), list) and w >= 1 and h >= 1


BOX_SLACK_PX = 1.0  # COCO's float boxes may pass the image edge by rounding; more is a broken box


def _check_box(ann: Mapping[str, Any], info: Mapping[str, Any], json_path: Path) -> None:
    """A usable object's box must lie inside its image."""
    x, y, w, h = (float(v) for v in ann["bbox"])
    width, height = float(info["width"]), float(info["height"])
    if x < -BOX_SLACK_PX or y < -BOX_SLACK_PX or x + w > width + BOX_SLACK_PX or y + h > height + BOX_SLACK_PX:
        raise DataError(f"{json_path} has annotation {ann.get('id')} with bbox [{x:g}, {y:g}, {w:g}, {h:g}] outside "
                        f"its {width:g}x{height:g} image {info.get('file_name')}: fix the box or remove the annotation")


def scan_coco(root: Path, hp: Hparams) -> list[CocoImage]:
    """The images of a COCO-format dataset that have at least one usable object."""
    json_path, folder = find_annotations(Path(root))
    coco = read_json(json_path)
    if not isinstance(coco, dict) or not all(isinstance(coco.get(k), list)
                                             for k in ("images", "annotations", "categories")):
        raise DataError(f"{json_path} lacks COCO's images, annotations and categories lists: {COCO_HINT}")
    try:
        found = _coco_images(coco, json_path, folder, hp)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DataError(f"{json_path} is not COCO instances JSON ({type(e).__name__}: {e}): replace it with the "
                        f"dataset's original file") from e
    if not found:
        raise DataError(f"{json_path} has no image with a non-crowd polygon annotation: {COCO_HINT}")
    missing = next((i.path for i in found if not i.path.is_file()), None)
    if missing is not None:
        raise DataError(f"{json_path} names the image {missing}, which is missing: restore it or fix the JSON")
    return found


def _coco_images(coco: Mapping[str, Any], json_path: Path, folder: Path, hp: Hparams) -> list[CocoImage]:
    """The images with usable objects, each object checked (structural errors are left to scan_coco)."""
    too_big = [c["id"] for c in coco["categories"] if c["id"] >= hp["num_classes"]]
    if too_big:
        raise DataError(f"{json_path} has category id {too_big[0]} but the model has {hp['num_classes']} classes "
                        f"(ids 1..{hp['num_classes'] - 1}): renumber the categories")
    per_image: dict[int, list[Mapping[str, Any]]] = {}
    for ann in coco["annotations"]:
        if _usable(ann):
            per_image.setdefault(ann["image_id"], []).append(ann)
    found = []
    for info in sorted(coco["images"], key=lambda i: i["id"]):
        anns = per_image.get(info["id"])
        if not anns:
            continue  # as torchvision's reference: images without usable objects are skipped
        for ann in anns:
            _check_box(ann, info, json_path)
        boxes = np.array([[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in anns)], dtype=np.float32)
        exclude = (f"remove image {info['id']} and its annotations from {json_path} (or replace the image with an "
                   f"intact copy) and check again")
        found.append(CocoImage(folder / info["file_name"], int(info["height"]), int(info["width"]), boxes,
                               np.array([a["category_id"] for a in anns], dtype=np.int64),
                               [a["segmentation"] for a in anns], exclude))
    return found


def polygon_masks(polygons: list[list[list[float]]], height: int, width: int) -> np.ndarray:
    """(K, H, W) uint8 masks from each object's COCO polygons ([x1, y1, x2, y2, ...] lists)."""
    from PIL import Image, ImageDraw

    masks = np.zeros((len(polygons), height, width), dtype=np.uint8)
    for k, parts in enumerate(polygons):
        canvas = Image.new("L", (width, height), 0)
        draw = ImageDraw.Draw(canvas)
        for part in parts:
            if len(part) >= 6:
                draw.polygon([(part[i], part[i + 1]) for i in range(0, len(part) - 1, 2)], fill=1, outline=1)
        masks[k] = np.asarray(canvas, dtype=np.uint8)
    return masks


def coco_batches(root: Path, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches over a COCO-format dataset, reshuffled every epoch and flipped at random by `seed`."""
    def masks(item: CocoImage, image: np.ndarray) -> np.ndarray:
        return polygon_masks(item.polygons, image.shape[1], image.shape[2])

    yield from _detection.annotated_batches(scan_coco(Path(root), hp), hp, batch_size, seed,
                                            masks if hp["instance_masks"] else None)


# --------------------------------------------------------------------------------------------
# Entry points


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Batches from "synthetic" or from a COCO-format dataset folder."""
    return dispatch(source, hp, batch_size, seed, synthetic_batches, coco_batches)


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    """Validate the data source up front (DataError) and describe it in one line; decode every
    image when `full` (`tbdkit data prepare`), else an even sample (the check before a run)."""
    if source == SYNTHETIC:
        masks = " and masks" if hp["instance_masks"] else ""
        return (f"synthetic COCO-sized images ({hp['image_long_side']} px by {hp['image_short_sides']} px) with "
                f"{hp['objects_min']}-{hp['objects_max']} random boxes{masks} each")
    items = scan_coco(Path(source), hp)
    objects = sum(len(i.labels) for i in items)
    kind = "objects with polygon masks" if hp["instance_masks"] else "objects"
    decoded = _detection.check_images(items, full)
    return (f"COCO-format dataset at {source}: {len(items)} images, {objects} {kind}; "
            f"{how_checked(decoded, len(items), 'images')}")
