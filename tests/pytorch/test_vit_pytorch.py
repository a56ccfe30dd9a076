"""ViT-B/16 on PyTorch (torchvision's VisionTransformer with vit_b_16's values): the same network as
torchvision.models.vit_b_16, DeiT's optimizer, and its FLOPs per 224x224 image against the DeiT paper's."""

import pytest
import torch
import torchvision

from tbdkit.adapters.pytorch_profiling import count_flops
from tbdkit.spec import catalog

MODEL = catalog.get("vit")
WORKLOAD = catalog.load_module(MODEL, "pytorch")
META = torch.device("meta")


def test_the_paper_preset_is_torchvisions_vit_b_16():
    with META:
        ours, theirs = WORKLOAD.network(MODEL.hp("paper")), torchvision.models.vit_b_16()
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert shapes == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert sum(p.numel() for p in ours.parameters()) == 86_567_656  # torchvision's 86.6 M


def test_deits_optimizer():
    training = WORKLOAD.build(MODEL.hp("smoke"), torch.device("cpu"))
    decay, no_decay = training.optimizer.param_groups
    assert (decay["weight_decay"], no_decay["weight_decay"], training.loss.label_smoothing) == (0.05, 0.0, 0.1)
    assert all(p.ndim > 1 for p in decay["params"]) and training.model.class_token in no_decay["params"]
    assert MODEL.hp("paper")["learning_rate"] == pytest.approx(5e-4 * MODEL.hp("paper")["default_batch"] / 512)


def test_flops_per_image_match_deits_17_6_g_multiply_adds():
    """DeiT's Table 1 gives ViT-B/16 at 224x224 17.6 "GFLOPs", counted by fvcore, which counts a multiply-add as
    one: 35.2 GFLOP at the kit's 2 per multiply-add. The kit's counter over one forward pass (on the meta
    device: no memory, no arithmetic), attention's products included."""
    with META:
        model = WORKLOAD.network(MODEL.hp("paper")).eval()
        images = torch.zeros(1, 3, 224, 224)
    flops = count_flops(META, lambda: model(images), model)
    assert flops / 2 == pytest.approx(17.6e9, rel=0.01)
