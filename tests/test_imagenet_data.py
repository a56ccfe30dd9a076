"""ImageNet input pipeline (ResNet-50 and Inception-v3): synthetic crops and the class-folder reader."""

import numpy as np
import pytest
from PIL import Image

from model_checks import hparams as _hp, load_data as _load, truncated_image

data = _load("resnet50")
HP = _hp("resnet50", "smoke")
COLOURS = {"n01440764": (220, 30, 30), "n01443537": (30, 200, 40), "n01484850": (20, 40, 230)}


def _take(it, n):
    return [next(it) for _ in range(n)]


@pytest.mark.parametrize("model, preset, size", [("resnet50", "smoke", 64), ("resnet50", "paper", 224),
                                                 ("inception_v3", "paper", 299)])
def test_synthetic_batches(model, preset, size):
    module, hp = _load(model), _hp(model, preset)
    a, b = _take(module.batches("synthetic", hp, 3, seed=5), 2), _take(module.batches("synthetic", hp, 3, seed=5), 2)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.images, y.images)
        np.testing.assert_array_equal(x.labels, y.labels)
        assert x.images.shape == (3, 3, size, size) and x.images.dtype == np.float32
        assert x.labels.dtype == np.int64 and 0 <= x.labels.min() and x.labels.max() < hp["num_classes"]
        assert x.samples == 3 and x.work == 3.0
    pool = np.concatenate([x.images for x in a])
    assert abs(float(pool.mean())) < 0.01 and abs(float(pool.std()) - 1.0) < 0.01
    assert not np.array_equal(a[0].images, next(module.batches("synthetic", hp, 3, seed=6)).images)
    assert f"{size}x{size}" in module.check_source("synthetic", hp)


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    """Three class folders of solid-colour JPEGs of different sizes, as ImageNet's train split."""
    root = tmp_path_factory.mktemp("imagenet") / "train"
    for k, (wnid, rgb) in enumerate(COLOURS.items()):
        (root / wnid).mkdir(parents=True)
        for i, (w, h) in enumerate([(500, 375), (333, 500)]):
            Image.new("RGB", (w, h), rgb).save(root / wnid / f"{wnid}_{i + k}.JPEG", quality=95)
    (root / "n01440764" / "notes.txt").write_text("not an image")
    return root


def test_scan_folder(imagenet):
    folder = data.scan_folder(imagenet, HP)
    assert folder.classes == sorted(COLOURS)
    assert len(folder.items) == 6
    assert [label for _, label in folder.items] == [0, 0, 1, 1, 2, 2]
    assert all(p.suffix == ".JPEG" for p, _ in folder.items)


def _expected_pixel(rgb, hp):
    return (np.array(rgb, np.float32) / 255 - np.array(hp["pixel_mean"])) / np.array(hp["pixel_std"])


@pytest.mark.parametrize("model", ["resnet50", "inception_v3"])
def test_folder_batches(imagenet, model):
    module, hp = _load(model), _hp(model, "paper")
    size = hp["image_size"]
    seen = []
    for b in _take(module.batches(str(imagenet), hp, 4, seed=2), 3):
        assert b.images.shape == (4, 3, size, size) and b.images.dtype == np.float32
        assert b.labels.dtype == np.int64 and b.work == 4.0
        for image, label in zip(b.images, b.labels):
            want = _expected_pixel(COLOURS[sorted(COLOURS)[label]], hp)
            np.testing.assert_allclose(image.mean(axis=(1, 2)), want, atol=0.05)
        seen += b.labels.tolist()
    # two epochs in twelve samples: every image twice, so every class four times
    assert sorted(seen) == [0] * 4 + [1] * 4 + [2] * 4
    again = next(module.batches(str(imagenet), hp, 4, seed=2))
    first = next(module.batches(str(imagenet), hp, 4, seed=2))
    np.testing.assert_array_equal(again.images, first.images)


def test_crop_box_stays_inside_and_follows_the_area_range():
    rng = np.random.default_rng(0)
    for _ in range(200):
        left, top, right, bottom = data._crop_box(rng, 500, 375, HP)
        assert 0 <= left < right <= 500 and 0 <= top < bottom <= 375
        ratio = (right - left) * (bottom - top) / (500 * 375)
        assert 0.07 <= ratio <= 1.0


def test_check_source_describes_the_folder(imagenet):
    text = data.check_source(str(imagenet), HP)
    assert text == (f"ImageNet folder at {imagenet}: 6 images in 3 classes, random resized 64x64 crops; "
                    f"all 6 images decoded")


def test_missing_path_is_a_data_error(tmp_path):
    with pytest.raises(data.DataError, match="does not exist") as e:
        data.check_source(str(tmp_path / "nope"), HP)
    assert "n01440764" in str(e.value)
    file = tmp_path / "x.txt"
    file.write_text("x")
    with pytest.raises(data.DataError, match="is not a folder"):
        data.check_source(str(file), HP)


def test_folder_without_class_folders_is_a_data_error(tmp_path):
    Image.new("RGB", (32, 32)).save(tmp_path / "loose.JPEG")
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(data.DataError, match="holds no class folders"):
        data.check_source(str(tmp_path), HP)
    with pytest.raises(data.DataError, match="holds no class folders"):
        next(data.batches(str(tmp_path), HP, 2, seed=0))


def test_too_many_classes_is_a_data_error(imagenet):
    hp = {**HP, "num_classes": 2}
    with pytest.raises(data.DataError, match="holds 3 class folders but the model has 2 classes"):
        data.check_source(str(imagenet), hp)


def test_damaged_image_is_a_data_error(tmp_path):
    (tmp_path / "n0").mkdir()
    (tmp_path / "n0" / "broken.JPEG").write_bytes(b"\xff\xd8 not really a jpeg")
    with pytest.raises(data.DataError, match="broken.JPEG cannot be decoded .*move broken.JPEG out of"):
        next(data.batches(str(tmp_path), HP, 1, seed=0))


@pytest.mark.parametrize("suffix, fmt", [(".JPEG", "JPEG"), (".png", "PNG")])
def test_a_truncated_image_is_named_by_both_checks(tmp_path, suffix, fmt):
    """The header of a cut-off file is intact: only decoding every pixel finds the damage."""
    (tmp_path / "n0").mkdir()
    for i in (0, 2):
        Image.new("RGB", (64, 48), (i, 0, 0)).save(tmp_path / "n0" / f"img{i}{suffix}", fmt)
    cut = truncated_image(tmp_path / "n0" / f"img1{suffix}", 64, 48, fmt)
    for full in (True, False):
        with pytest.raises(data.DataError, match="cannot be decoded") as e:
            data.check_source(str(tmp_path), HP, full=full)
        assert str(cut) in str(e.value) and f"move img1{suffix} out of {tmp_path / 'n0'}" in str(e.value)


def test_the_check_before_a_run_decodes_a_sample(tmp_path):
    (tmp_path / "n0").mkdir()
    for i in range(20):
        Image.new("RGB", (8, 8), (i, 0, 0)).save(tmp_path / "n0" / f"{i:02d}.png")
    sample = data.check_source(str(tmp_path), HP)
    assert sample.endswith("16 of 20 images decoded (`tbdkit data prepare` decodes them all)")
    assert data.check_source(str(tmp_path), HP, full=True).endswith("all 20 images decoded")
