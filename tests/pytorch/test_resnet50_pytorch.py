"""ResNet-50 on PyTorch: the published size, a smoke step that learns, every math mode."""

import sys

import numpy as np

import pytest
import torch

from model_checks import converge_briefly, modules, parameters

MODEL, WORKLOAD, DATA = modules("resnet50")


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_parameter_count_is_the_published_one(preset):
    # He et al. 2016 / torchvision: 25.56 M parameters, whatever the crop size.
    net = WORKLOAD.network(MODEL.hp(preset))
    assert parameters(net) == 25_557_032
    assert round(parameters(net) / 1e6, 2) == MODEL.info["params_millions"] == 25.56


def test_v1_5_strides_in_the_3x3_convolution():
    net = WORKLOAD.network(MODEL.hp("paper"))
    first = net.layer2[0]
    assert first.conv1.stride == (1, 1) and first.conv2.stride == (2, 2)


def test_logits_shape():
    hp = MODEL.hp("smoke")
    inputs = WORKLOAD.to_device(next(DATA.batches("synthetic", hp, 2, seed=0)), torch.device("cpu"))
    with torch.no_grad():
        logits = WORKLOAD.network(hp).eval()(inputs["images"])
    assert logits.shape == (2, 1000) and inputs["labels"].dtype == torch.int64


def test_converge_task_is_the_digits_with_a_fixed_held_out_share():
    hp = MODEL.hp("converge")
    task = DATA.convergence_task("synthetic", hp, 64, seed=0)
    other = DATA.convergence_task("synthetic", hp, 64, seed=1)
    held = np.concatenate([b.images for b in task.held_out])
    assert held.shape == (359, 3, 16, 16) and sum(b.samples for b in task.held_out) == 359  # 20% of 1,797
    assert np.array_equal(held, np.concatenate([b.images for b in other.held_out]))  # the same for every seed
    batch = next(task.train)
    assert batch.images.shape == (64, 3, 16, 16) and batch.labels.dtype == np.int64
    train_rows = {r.tobytes() for r in next(DATA.convergence_task("synthetic", hp, 1438, 0).train).images}
    assert not train_rows & {r.tobytes() for r in held}  # no held-out scan is trained on
    assert sorted({int(x) for b in task.held_out for x in b.labels}) == list(range(10))
    perfect = [np.eye(10)[b.labels] for b in task.held_out]
    assert DATA.quality(perfect, task.held_out) == 1.0
    with pytest.raises(DATA.DataError, match="leave DATA unset"):
        DATA.convergence_task("/some/folder", hp, 64, 0)


def test_converge_trains_resnet50_on_the_digits_and_records_the_curve(tmp_path):
    hp = {**MODEL.hp("converge"), "eval_every_s": 2.0, "max_train_s": 6.0, "target": 1.01}
    c = converge_briefly("resnet50", hp, 32, tmp_path)["convergence"]
    assert c["first_quality"] < 0.5 and c["held_out_samples"] == 359  # untrained: near chance


def test_converge_without_scikit_learn_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn now raises ImportError
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(DATA.DataError, match="pip install scikit-learn"):
        DATA.convergence_task("synthetic", MODEL.hp("converge"), 64, seed=0)
