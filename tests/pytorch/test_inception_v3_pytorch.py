"""Inception-v3 on PyTorch: the published size, the auxiliary loss, a smoke step that learns, every math mode."""


import pytest
import torch

from model_checks import modules, parameters

MODEL, WORKLOAD, DATA = modules("inception_v3")


def test_parameter_count_is_the_published_one():
    # Szegedy et al. 2016 / the TBD paper: 23.8 M without the auxiliary classifier; torchvision's
    # network with it has 27.16 M.
    paper = WORKLOAD.network(MODEL.hp("paper"))
    assert parameters(paper) == 27_161_264
    assert parameters(paper, skip_prefix="AuxLogits.") == 23_834_568
    assert round(parameters(paper, skip_prefix="AuxLogits.") / 1e6, 1) == MODEL.info["params_millions"] == 23.8
    smoke = WORKLOAD.network(MODEL.hp("smoke"))
    assert smoke.AuxLogits is None and parameters(smoke) == 23_834_568


def test_paper_objective_adds_the_weighted_auxiliary_loss():
    hp = MODEL.hp("paper")
    torch.manual_seed(0)
    training = WORKLOAD.build(hp, torch.device("cpu"))
    inputs = WORKLOAD.to_device(next(DATA.batches("synthetic", hp, 2, seed=0)), torch.device("cpu"))
    assert inputs["images"].shape == (2, 3, 299, 299)
    with torch.no_grad():
        torch.manual_seed(1)
        total = WORKLOAD.objective(training, inputs["images"], inputs["labels"])
        torch.manual_seed(1)
        out = training.model(inputs["images"])
    smooth = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    want = smooth(out.logits, inputs["labels"]) + 0.4 * smooth(out.aux_logits, inputs["labels"])
    assert out.aux_logits.shape == (2, 1000) and float(total) == pytest.approx(float(want), rel=1e-4)
