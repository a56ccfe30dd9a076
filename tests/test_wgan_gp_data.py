"""WGAN-GP input pipeline: synthetic 64x64 images and the Downsampled ImageNet folder of PNGs."""

import numpy as np
import pytest
from PIL import Image

from model_checks import hparams, load_data, truncated_image

data = load_data("wgan_gp")
HP = hparams("wgan_gp", "smoke")


def test_unit_range_matches_gan_64x64():
    pixels = np.array([[[[0, 128, 255]]]], dtype=np.uint8)  # (1, 1, 1, 3)
    x = data.to_unit_range(pixels)
    assert x.shape == (1, 3, 1, 1) and x.dtype == np.float32
    np.testing.assert_allclose(x.reshape(-1), [-1.0, 2 * (128 / 255 - 0.5), 1.0], atol=1e-6)


def test_synthetic_batches():
    a = [next(it) for it in [data.batches("synthetic", HP, 3, seed=4)] for _ in range(2)]
    b = next(data.batches("synthetic", HP, 3, seed=4))
    np.testing.assert_array_equal(a[0].images, b.images)
    assert not np.array_equal(a[0].images, a[1].images)
    for batch in a:
        assert batch.images.shape == (5, 3, 3, 64, 64) and batch.images.dtype == np.float32
        assert batch.samples == 15 and batch.work == 15.0
        assert batch.images.min() >= -1.0 and batch.images.max() <= 1.0
        levels = (batch.images + 1) / 2 * 255  # 256 pixel levels, as decoded PNGs have
        np.testing.assert_allclose(levels, np.rint(levels), atol=1e-3)
        assert 0.2 < float(batch.images.std()) < 0.8
    assert "64x64" in data.check_source("synthetic", HP) and "5 critic updates" in data.check_source("synthetic", HP)


@pytest.fixture(scope="module")
def small_imagenet(tmp_path_factory):
    """Seven 64x64 PNGs named as image-net.org/small's train_64x64 (zero-padded numbers)."""
    root = tmp_path_factory.mktemp("imagenet64") / "train_64x64"
    root.mkdir()
    for i in range(7):
        pixels = np.full((64, 64, 3), 30 * i, dtype=np.uint8)
        pixels[:, :, 2] = 255 - 30 * i
        Image.fromarray(pixels).save(root / f"{i + 1:07d}.png")
    (root / "README.txt").write_text("not an image")
    return root


def test_find_images(small_imagenet):
    assert [p.name for p in data.find_images(small_imagenet)] == [f"{i:07d}.png" for i in range(1, 8)]


def test_folder_batches(small_imagenet):
    hp = {**HP, "critic_iters": 2}
    seen = []
    for batch in [b for it in [data.batches(str(small_imagenet), hp, 7, seed=1)] for b in (next(it), next(it))]:
        assert batch.images.shape == (2, 7, 3, 64, 64) and batch.samples == 14
        for image in batch.images.reshape(-1, 3, 64, 64):
            red = int(round((float(image[0, 0, 0]) + 1) / 2 * 255))
            assert red % 30 == 0 and np.allclose(image[0], image[0, 0, 0]) and np.allclose(image[1], image[0])
            assert float(image[2, 0, 0]) == pytest.approx(2 * ((255 - red) / 255 - 0.5), abs=1e-6)
            seen.append(red // 30)
    # four epochs in 28 images: every PNG four times
    assert sorted(seen) == sorted(4 * list(range(7)))


def test_check_source_describes_the_folder(small_imagenet):
    text = data.check_source(str(small_imagenet), HP)
    assert text == (f"Downsampled ImageNet at {small_imagenet}: 7 64x64 PNGs, 5 critic updates per iteration; "
                    f"all 7 PNGs decoded")


def test_wrong_size_is_a_data_error(tmp_path):
    Image.new("RGB", (32, 32)).save(tmp_path / "0000001.png")
    with pytest.raises(data.DataError, match="is 32x32 but the model trains on 64x64 images") as e:
        data.check_source(str(tmp_path), HP)
    assert "train_64x64" in str(e.value)


@pytest.mark.parametrize("make, words", [
    (lambda p: p / "missing", "does not exist"),
    (lambda p: p, "holds no .png images"),
])
def test_bad_folder_is_a_data_error(tmp_path, make, words):
    with pytest.raises(data.DataError, match=words):
        data.check_source(str(make(tmp_path)), HP)
    with pytest.raises(data.DataError, match=words):
        next(data.batches(str(make(tmp_path)), HP, 1, seed=0))


def test_damaged_png_is_a_data_error(tmp_path):
    (tmp_path / "0000001.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(data.DataError, match="0000001.png cannot be decoded .*move 0000001.png out of"):
        next(data.batches(str(tmp_path), HP, 1, seed=0))


def test_a_truncated_png_past_the_first_is_named_by_both_checks(tmp_path):
    for i in range(2):
        Image.new("RGB", (64, 64), (i, 0, 0)).save(tmp_path / f"{i + 1:07d}.png")
    cut = truncated_image(tmp_path / "0000003.png", 64, 64, "PNG")
    for full in (True, False):
        with pytest.raises(data.DataError, match="cannot be decoded") as e:
            data.check_source(str(tmp_path), HP, full=full)
        assert str(cut) in str(e.value) and f"move 0000003.png out of {tmp_path}" in str(e.value)
