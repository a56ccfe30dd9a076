"""Detection input pipeline (Faster R-CNN): synthetic VOC-sized images with boxes, the Pascal VOC reader."""

import numpy as np
import pytest
from PIL import Image

from model_checks import hparams, load_data, truncated_image

data = load_data("faster_rcnn")
HP = hparams("faster_rcnn", "smoke")


def _take(it, n):
    return [next(it) for _ in range(n)]


def test_synthetic_batches():
    a, b = _take(data.batches("synthetic", HP, 2, seed=3), 3), _take(data.batches("synthetic", HP, 2, seed=3), 3)
    sizes = set()
    for x, y in zip(a, b):
        assert x.samples == 2 and x.work == 2.0 and len(x.targets) == 2
        for image, target, same in zip(x.images, x.targets, y.images):
            np.testing.assert_array_equal(image, same)
            c, h, w = image.shape
            assert c == 3 and image.dtype == np.float32 and 0 <= image.min() and image.max() <= 1
            assert max(h, w) == 500 and min(h, w) in (333, 375)
            sizes.add((h, w))
            boxes, labels = target["boxes"], target["labels"]
            assert boxes.dtype == np.float32 and labels.dtype == np.int64 and 1 <= len(boxes) == len(labels) <= 6
            assert np.all(boxes[:, 0] >= 0) and np.all(boxes[:, 2] <= w) and np.all(boxes[:, 1] >= 0)
            assert np.all(boxes[:, 3] <= h) and np.all(boxes[:, 2] - boxes[:, 0] >= 0.1 * w - 1e-3)
            assert labels.min() >= 1 and labels.max() <= 20
    assert len(sizes) > 1
    assert "VOC-sized" in data.check_source("synthetic", HP)


OBJECTS = {
    "000005": [("chair", (263, 211, 324, 339), 0), ("chair", (5, 244, 67, 374), 1), ("sofa", (10, 10, 100, 120), 0)],
    "000007": [("car", (141, 50, 500, 330), 0)],
    "000009": [("horse", (69, 172, 270, 330), 0), ("person", (150, 141, 229, 284), 0)],
}


def _voc_xml(image_id, objects, size=(500, 375)):
    parts = [f"<annotation><folder>VOC2007</folder><filename>{image_id}.jpg</filename>",
             f"<size><width>{size[0]}</width><height>{size[1]}</height><depth>3</depth></size>"]
    for name, (x1, y1, x2, y2), difficult in objects:
        parts.append(f"<object><name>{name}</name><pose>Unspecified</pose><truncated>0</truncated>"
                     f"<difficult>{difficult}</difficult><bndbox><xmin>{x1}</xmin><ymin>{y1}</ymin>"
                     f"<xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox></object>")
    return "".join(parts) + "</annotation>"


@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    """A three-image VOC2007 folder in the real layout, plus one image not in trainval."""
    root = tmp_path_factory.mktemp("VOCdevkit") / "VOC2007"
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / sub).mkdir(parents=True)
    for k, (image_id, objects) in enumerate({**OBJECTS, "000012": [("dog", (1, 1, 50, 50), 0)]}.items()):
        (root / "Annotations" / f"{image_id}.xml").write_text(_voc_xml(image_id, objects))
        Image.new("RGB", (500, 375), (40 * k, 100, 200)).save(root / "JPEGImages" / f"{image_id}.jpg", quality=95)
    (root / "ImageSets" / "Main" / "trainval.txt").write_text("\n".join(OBJECTS) + "\n")
    return root


def test_scan_voc(voc):
    items = data.scan_voc(voc)
    assert [i.path.name for i in items] == ["000005.jpg", "000007.jpg", "000009.jpg"]
    first = items[0]
    # 1-based inclusive VOC pixels to 0-based; the difficult chair is left out
    np.testing.assert_array_equal(first.boxes, [[262, 210, 323, 338], [9, 9, 99, 119]])
    assert first.labels.tolist() == [data.VOC_CLASSES.index("chair") + 1, data.VOC_CLASSES.index("sofa") + 1]
    assert items[2].labels.tolist() == [13, 15]  # horse, person


def test_voc_batches(voc):
    items = {i.path.name: i for i in data.scan_voc(voc)}
    seen = []
    for batch in _take(data.batches(str(voc), HP, 3, seed=0), 4):
        for image, target in zip(batch.images, batch.targets):
            assert image.shape == (3, 375, 500) and image.dtype == np.float32
            k = round(float(image[0, 0, 0]) * 255 / 40)
            name = list(OBJECTS)[k] + ".jpg"
            item = items[name]
            np.testing.assert_array_equal(target["labels"], item.labels)
            mirrored = np.stack([500 - item.boxes[:, 2], item.boxes[:, 1], 500 - item.boxes[:, 0], item.boxes[:, 3]], 1)
            assert np.array_equal(target["boxes"], item.boxes) or np.array_equal(target["boxes"], mirrored)
            seen.append((name, np.array_equal(target["boxes"], item.boxes)))
    assert sorted(n for n, _ in seen) == sorted(4 * [f"{i}.jpg" for i in OBJECTS])
    assert {flipped for _, flipped in seen} == {True, False}


def test_flip_mirrors_the_image_and_boxes():
    image = np.zeros((3, 4, 10), np.float32)
    image[:, :, 0] = 1
    out, target = data.flip(image, {"boxes": np.array([[1, 0, 3, 2]], np.float32), "labels": np.array([1])})
    assert out[0, 0, 9] == 1 and out[0, 0, 0] == 0
    np.testing.assert_array_equal(target["boxes"], [[7, 0, 9, 2]])


def test_check_source_describes_the_folder(voc):
    assert data.check_source(str(voc), HP) == (f"Pascal VOC at {voc}: 3 images, 5 objects (difficult ones left "
                                               f"out); all 3 images decoded")


def test_missing_and_wrong_folders_are_data_errors(tmp_path):
    with pytest.raises(data.DataError, match="does not exist"):
        data.check_source(str(tmp_path / "nope"), HP)
    with pytest.raises(data.DataError, match="has no Annotations and JPEGImages folders") as e:
        next(data.batches(str(tmp_path), HP, 1, seed=0))
    assert "trainval.txt" in str(e.value)


def test_damaged_annotations_are_data_errors(voc, tmp_path):
    import shutil
    root = tmp_path / "VOC2007"
    shutil.copytree(voc, root)
    xml = root / "Annotations" / "000007.xml"
    xml.write_text(_voc_xml("000007", [("unicorn", (1, 1, 5, 5), 0)]))
    with pytest.raises(data.DataError, match="class 'unicorn', not one of the 20 VOC classes"):
        data.check_source(str(root), HP)
    xml.write_text("<annotation><object>")
    with pytest.raises(data.DataError, match="cannot parse .*000007.xml"):
        data.check_source(str(root), HP)
    xml.unlink()
    with pytest.raises(data.DataError, match="000007.xml is listed in ImageSets/Main/trainval.txt but missing"):
        data.check_source(str(root), HP)
    (root / "ImageSets" / "Main" / "trainval.txt").write_text("000005\n")
    (root / "JPEGImages" / "000005.jpg").unlink()
    with pytest.raises(data.DataError, match="names the image .*000005.jpg, which is missing"):
        data.check_source(str(root), HP)


def _copy(voc, tmp_path):
    import shutil
    root = tmp_path / "VOC2007"
    shutil.copytree(voc, root)
    return root


@pytest.mark.parametrize("box", [(400, 10, 520, 100), (0, 10, 40, 100), (60, 10, 40, 100)])
def test_a_box_outside_its_image_or_with_swapped_corners_is_named(voc, tmp_path, box):
    root = _copy(voc, tmp_path)
    xml = root / "Annotations" / "000007.xml"
    xml.write_text(_voc_xml("000007", [("car", box, 0)]))
    with pytest.raises(data.DataError, match="car box .* not inside its 500x375 image") as e:
        data.check_source(str(root), HP)
    assert str(xml) in str(e.value) and "fix the box or remove the object" in str(e.value)


def test_a_truncated_jpeg_is_named_with_the_list_to_remove_it_from(voc, tmp_path):
    root = _copy(voc, tmp_path)
    jpg = truncated_image(root / "JPEGImages" / "000009.jpg", 500, 375)
    for full in (True, False):
        with pytest.raises(data.DataError, match="cannot be decoded") as e:
            data.check_source(str(root), HP, full=full)
        assert str(jpg) in str(e.value) and "remove 000009 from ImageSets/Main/trainval.txt" in str(e.value)
    with pytest.raises(data.DataError, match="000009.jpg cannot be decoded .*remove 000009 from"):
        _take(data.batches(str(root), HP, 3, seed=0), 2)
