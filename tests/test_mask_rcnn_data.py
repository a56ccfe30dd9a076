"""Instance segmentation input pipeline (Mask R-CNN): synthetic images with masks, the COCO-format reader."""

import json
import numpy as np
import pytest
from PIL import Image

from model_checks import hparams, load_data, truncated_image

data = load_data("mask_rcnn")
HP = hparams("mask_rcnn", "smoke")


def test_synthetic_batches_carry_a_mask_per_box():
    batches = data.batches("synthetic", HP, 2, seed=0)
    for batch in (next(batches), next(batches)):
        assert batch.samples == 2
        for image, target in zip(batch.images, batch.targets):
            _, h, w = image.shape
            assert max(h, w) == 640 and min(h, w) in (427, 480)
            masks, boxes = target["masks"], target["boxes"]
            assert masks.shape == (len(boxes), h, w) and masks.dtype == np.uint8
            assert target["labels"].max() <= 90 and 1 <= len(boxes) <= 4
            for mask, (x1, y1, x2, y2) in zip(masks, boxes):
                ys, xs = np.nonzero(mask)
                assert xs.min() >= np.floor(x1) and xs.max() <= np.ceil(x2)
                assert ys.min() >= np.floor(y1) and ys.max() <= np.ceil(y2)
                assert 0.7 < mask.sum() / ((x2 - x1) * (y2 - y1)) < 0.85  # an ellipse fills pi/4 of its box
    assert "COCO-sized" in data.check_source("synthetic", HP)


ANNOTATIONS = [
    # image 1: a square person and a triangle dog; a crowd region that is skipped
    {"id": 10, "image_id": 1, "category_id": 1, "iscrowd": 0, "bbox": [10, 20, 40, 40], "area": 1600,
     "segmentation": [[10, 20, 50, 20, 50, 60, 10, 60]]},
    {"id": 11, "image_id": 1, "category_id": 18, "iscrowd": 0, "bbox": [100, 100, 60, 50], "area": 1500,
     "segmentation": [[100, 100, 160, 100, 100, 150]]},
    {"id": 12, "image_id": 1, "category_id": 1, "iscrowd": 1, "bbox": [0, 0, 5, 5], "area": 25,
     "segmentation": {"counts": [0, 25], "size": [120, 200]}},
    # image 2: one car; image 3: no usable object, skipped
    {"id": 13, "image_id": 2, "category_id": 3, "iscrowd": 0, "bbox": [5, 5, 30, 20], "area": 600,
     "segmentation": [[5, 5, 35, 5, 35, 25, 5, 25]]},
    {"id": 14, "image_id": 3, "category_id": 3, "iscrowd": 0, "bbox": [5, 5, 0, 20], "area": 0,
     "segmentation": [[5, 5, 5, 5, 5, 25]]},
]


def _write_coco(root, annotations=ANNOTATIONS, categories=None):
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "train2017").mkdir(exist_ok=True)
    images = []
    for image_id, (w, h) in {1: (200, 180), 2: (64, 48), 3: (32, 32)}.items():
        name = f"{image_id:012d}.jpg"
        Image.new("RGB", (w, h), (60 * image_id, 90, 120)).save(root / "train2017" / name, quality=95)
        images.append({"id": image_id, "file_name": name, "width": w, "height": h})
    cats = categories or [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 18, "name": "dog"}]
    coco = {"images": images, "annotations": annotations, "categories": cats}
    (root / "annotations" / "instances_train2017.json").write_text(json.dumps(coco))
    return root


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return _write_coco(tmp_path_factory.mktemp("coco"))


def test_scan_coco(coco):
    items = data.scan_coco(coco, HP)
    assert [i.path.name for i in items] == ["000000000001.jpg", "000000000002.jpg"]
    np.testing.assert_array_equal(items[0].boxes, [[10, 20, 50, 60], [100, 100, 160, 150]])
    assert items[0].labels.tolist() == [1, 18] and items[1].labels.tolist() == [3]


def test_polygon_masks():
    square, triangle = data.polygon_masks([[[10, 20, 50, 20, 50, 60, 10, 60]], [[100, 100, 160, 100, 100, 150]]],
                                          180, 200)
    assert square[20:61, 10:51].all() and square.sum() == 41 * 41
    assert triangle[100, 100] == 1 and triangle[149, 159] == 0
    assert abs(int(triangle.sum()) - 60 * 50 // 2) < 120


def test_coco_batches(coco):
    items = {i.path.name: i for i in data.scan_coco(coco, HP)}
    seen = []
    for batch in [next(it) for it in [data.batches(str(coco), HP, 2, seed=1)] for _ in range(3)]:
        for image, target in zip(batch.images, batch.targets):
            k = round(float(image[0, 0, 0]) * 255 / 60)
            item = items[f"{k:012d}.jpg"]
            assert image.shape == (3, item.height, item.width)
            assert target["masks"].shape == (len(item.labels), item.height, item.width)
            np.testing.assert_array_equal(target["labels"], item.labels)
            flipped = not np.array_equal(target["boxes"], item.boxes)
            for mask, (x1, y1, x2, y2) in zip(target["masks"], target["boxes"]):
                ys, xs = np.nonzero(mask)   # each mask stays inside its (possibly mirrored) box
                assert xs.min() >= x1 - 1 and xs.max() <= x2 and ys.min() >= y1 - 1 and ys.max() <= y2
            seen.append((k, flipped))
    assert sorted(k for k, _ in seen) == [1, 1, 1, 2, 2, 2]
    assert {f for _, f in seen} == {True, False}


def test_check_source_describes_the_dataset(coco):
    text = data.check_source(str(coco), HP)
    assert text == f"COCO-format dataset at {coco}: 2 images, 3 objects with polygon masks; all 2 images decoded"


def test_layout_errors(tmp_path):
    with pytest.raises(data.DataError, match="does not exist"):
        data.check_source(str(tmp_path / "nope"), HP)
    with pytest.raises(data.DataError, match="has no annotations/instances_\\*.json") as e:
        next(data.batches(str(tmp_path), HP, 1, seed=0))
    assert "train2017" in str(e.value)
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "instances_val2017.json").write_text("{}")
    with pytest.raises(data.DataError, match="names the split val2017, but .* is not a folder"):
        data.check_source(str(tmp_path), HP)
    (tmp_path / "val2017").mkdir()
    with pytest.raises(data.DataError, match="lacks COCO's images, annotations and categories"):
        data.check_source(str(tmp_path), HP)
    (tmp_path / "annotations" / "instances_val2017.json").write_text("{not json")
    with pytest.raises(data.DataError, match="cannot parse"):
        data.check_source(str(tmp_path), HP)


def test_content_errors(tmp_path):
    _write_coco(tmp_path, categories=[{"id": 1, "name": "person"}, {"id": 95, "name": "robot"}])
    with pytest.raises(data.DataError, match="category id 95 but the model has 91 classes"):
        data.check_source(str(tmp_path), HP)
    _write_coco(tmp_path, annotations=ANNOTATIONS[2:3])
    with pytest.raises(data.DataError, match="no image with a non-crowd polygon annotation"):
        data.check_source(str(tmp_path), HP)
    _write_coco(tmp_path)
    (tmp_path / "train2017" / "000000000002.jpg").unlink()
    with pytest.raises(data.DataError, match="names the image .*000000000002.jpg, which is missing"):
        data.check_source(str(tmp_path), HP)


def test_efficientdet_reads_the_same_coco_without_masks(coco):
    effdet = load_data("efficientdet")
    hp = hparams("efficientdet", "smoke")
    batch = next(effdet.batches("synthetic", hp, 2, seed=0))
    assert all(set(t) == {"boxes", "labels"} for t in batch.targets)
    real = next(effdet.batches(str(coco), hp, 3, seed=0))
    assert all(set(t) == {"boxes", "labels"} for t in real.targets) and real.samples == 3
    assert effdet.check_source(str(coco), hp) == (f"COCO-format dataset at {coco}: 2 images, 3 objects; "
                                                  f"all 2 images decoded")
    with pytest.raises(effdet.DataError, match="does not exist"):
        effdet.check_source(str(coco / "nope"), hp)


@pytest.mark.parametrize("shape", ["[]", "null", '{"images": {}, "annotations": [], "categories": []}',
                                   '{"images": [{"id": 1}], "annotations": [{"image_id": 1, "bbox": [1, 1, 5, 5], '
                                   '"segmentation": [[1, 1, 5, 1, 5, 5]]}], "categories": [{"id": 1}]}',
                                   '{"images": [], "annotations": [7], "categories": [{"name": "x"}]}'])
def test_json_of_the_wrong_shape_is_one_sentence_naming_the_file(tmp_path, shape):
    _write_coco(tmp_path)
    json_path = tmp_path / "annotations" / "instances_train2017.json"
    json_path.write_text(shape)
    with pytest.raises(data.DataError) as e:
        data.check_source(str(tmp_path), HP)
    msg = str(e.value)
    assert str(json_path) in msg and ("original file" in msg or "lacks COCO's" in msg) and "\n" not in msg, msg


def test_a_box_outside_its_image_is_named(tmp_path):
    wide = {**ANNOTATIONS[3], "bbox": [50, 5, 30, 20]}  # image 2 is 64 px wide: 50 + 30 = 80
    _write_coco(tmp_path, annotations=[*ANNOTATIONS[:3], wide])
    with pytest.raises(data.DataError, match="annotation 13 with bbox \\[50, 5, 30, 20\\] outside its 64x48 image"):
        data.check_source(str(tmp_path), HP)


def test_a_truncated_image_is_named_with_how_to_leave_it_out(tmp_path):
    _write_coco(tmp_path)
    jpg = truncated_image(tmp_path / "train2017" / "000000000001.jpg", 200, 180)
    for full in (True, False):
        with pytest.raises(data.DataError, match="cannot be decoded") as e:
            data.check_source(str(tmp_path), HP, full=full)
        assert str(jpg) in str(e.value) and "remove image 1 and its annotations from" in str(e.value)
