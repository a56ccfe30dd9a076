"""EfficientDet-D0 on PyTorch: the published size, effdet's square input, a smoke step that
learns, every math mode."""


import pytest
import torch

from model_checks import modules, parameters

MODEL, WORKLOAD, DATA = modules("efficientdet")


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_parameter_count_is_the_published_one(preset):
    # Tan et al. 2020 Table 2: EfficientDet-D0 has 3.9 M parameters (effdet: 3,880,067 with 90 classes).
    net = WORKLOAD.network(MODEL.hp(preset))
    assert parameters(net) == 3_880_067
    assert round(parameters(net) / 1e6, 1) == MODEL.info["params_millions"] == 3.9
    assert net.config.image_size == (MODEL.hp(preset)["image_size"],) * 2
    assert net.config.backbone_name == "tf_efficientnet_b0" and net.config.fpn_cell_repeats == 3


def test_resize_pad_scales_boxes_into_the_square_input():
    hp = MODEL.hp("paper")
    training = WORKLOAD.build(hp, torch.device("cpu"))
    images = [torch.full((3, 320, 640), 0.5), torch.full((3, 1024, 256), 0.5)]
    targets = [{"boxes": torch.tensor([[10.0, 20.0, 110.0, 220.0]]), "labels": torch.tensor([3])},
               {"boxes": torch.tensor([[0.0, 0.0, 256.0, 1024.0], [8.0, 16.0, 24.0, 48.0]]),
                "labels": torch.tensor([1, 90])}]
    batch, target = WORKLOAD.resize_pad(training, images, targets)
    assert batch.shape == (2, 3, 512, 512)
    mean, std = torch.tensor(hp["pixel_mean"]), torch.tensor(hp["pixel_std"])
    assert torch.allclose(batch[0, :, 0, 0], (0.5 - mean) / std) and torch.all(batch[0, :, 256:] == 0)
    assert torch.all(batch[1, :, :, 128:] == 0)
    # (x1, y1, x2, y2) scaled by 512 / long side, reordered to effdet's (y1, x1, y2, x2)
    assert target["bbox"][0, 0].tolist() == pytest.approx([16.0, 8.0, 176.0, 88.0])
    assert target["bbox"][0, 1].tolist() == [-1, -1, -1, -1] and target["cls"][0].tolist() == [3, -1]
    assert target["bbox"][1, 0].tolist() == pytest.approx([0.0, 0.0, 512.0, 128.0])
    assert target["cls"][1].tolist() == [1, 90]
