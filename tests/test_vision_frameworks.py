"""The vision models on every framework they have: the same network (parity of `tbdkit describe`),
the same weights giving the same outputs, the listed state differences, and one `tbdkit bench` of
ResNet-50's smoke preset with its summary read closely (test_every_cell_benches.py benches the others).
Needs every stack installed (`make test` sets them up)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from framework_parity import (assert_same_network, assert_smoke_flops, described_with_pytorch_weights,
                              listed_smoke_state)
from model_checks import assert_run_holds_together, tbdkit
from tbdkit.spec import catalog
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

# Each on every framework it has (tests/test_readme.py holds the README's support matrix to the catalog's: MXNet has
# no WGAN-GP, its gradient penalty needs the second derivative of a convolution, which MXNet 1.9 does not have).
MODELS = ["resnet50", "inception_v3", "wgan_gp"]
PAIRS = [(m, a, b) for m in MODELS for a, b in itertools.combinations(catalog.get(m).frameworks, 2)]
# Forward FLOPs of one smoke sample as torchvision's networks define them (2 per multiply-accumulate
# of every convolution and dense layer; torch.utils.flop_counter gives exactly these): ResNet-50 on
# 64x64 is about 8.2 GFLOPs x (64 / 224)^2, Inception-v3 on 160x160 about 11.4 GFLOPs x (160 / 299)^2,
# up to the rounding of feature-map sizes; WGAN-GP's sample is one image generated and scored at DIM 16.
SMOKE_FORWARD_FLOPS = {"resnet50": 671_383_552, "inception_v3": 2_558_945_984, "wgan_gp": 441_192_448}


@pytest.fixture(scope="module")
def described(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """Each model described in each of its frameworks, PyTorch's weights saved and loaded into the others."""
    return {(model, fw): d for model in MODELS for fw, d in described_with_pytorch_weights(
        model, catalog.get(model).frameworks, tmp_path_factory.mktemp(model)).items()}


@pytest.mark.parametrize("model, a, b", PAIRS)
def test_the_same_network_on_each_pair(described, model, a, b):
    assert_same_network(described[model, a], described[model, b])


@pytest.mark.parametrize("model, framework", [(m, fw) for m in MODELS for fw in catalog.get(m).frameworks])
def test_flops_are_the_networks(described, model, framework):
    assert_smoke_flops(described[model, framework]["flops_per_sample"], SMOKE_FORWARD_FLOPS[model])


def test_wgan_gp_layers_in_canonical_order(described):
    """Generator then critic, each block's shortcut before its residual path (PyTorch's forward order);
    batch norm in the generator, one-group layer norm in the critic."""
    kinds = [x["kind"] for x in described["wgan_gp", "pytorch"]["layers"]]
    block_g, block_c = ["conv2d", "batchnorm", "conv2d", "batchnorm", "conv2d"], ["conv2d", "layernorm", "conv2d",
                                                                                   "layernorm", "conv2d"]
    assert kinds == ["dense", *block_g * 4, "batchnorm", "conv2d", "conv2d", *block_c * 4, "dense"]


@pytest.mark.parametrize("model", MODELS)
def test_state_differences_are_the_listed_ones(described, model):
    assert {fw: described[model, fw]["framework_state"]["non_trainable_state"]
            for fw in catalog.get(model).frameworks} == listed_smoke_state(model)


@pytest.mark.parametrize("model", MODELS)
def test_same_weights_same_outputs(described, model):
    """PyTorch's weights, moved through the canonical layout into TensorFlow and MXNet (read back unchanged),
    give the same inference-mode outputs (logits of two synthetic images; WGAN-GP: the critic's scores of
    two images generated from fixed noise): the same network, numerically."""
    theirs = np.load(described[model, "pytorch"]["npz"])
    for framework in [fw for fw in catalog.get(model).frameworks if fw != "pytorch"]:
        ours = np.load(described[model, framework]["npz"])
        scale = float(np.abs(theirs["output"]).max())
        np.testing.assert_allclose(ours["output"], theirs["output"], atol=1e-5 * max(scale, 1.0),
                                   err_msg=framework)


def test_resnet50_bench_reads_synthetic_crops_and_counts_images(tmp_path):
    """`tbdkit bench` end to end for a vision model on this CPU (MXNet's agent: it benches the fewest other
    models in test_every_cell_benches.py): its table, and its summary (model, batch, units, the synthetic
    data it read, torchvision's parameter count)."""
    results = tmp_path / "r"
    proc = tbdkit("bench", "--model", "resnet50", "--framework", "mxnet", "--preset", "smoke", "--device", "cpu",
                  "--batch", "2", "--max-warmup-s", "1", "--max-measure-s", "2", "--results", str(results))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.count("ResNet-50 v1.5 (smoke preset)") == 1 and "mxnet" in proc.stdout
    (run,) = [p.parent for p in results.glob("*/summary.json")]
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] in MEASURED, s
    assert_run_holds_together(run, s, "resnet50")
    assert s["model_info"]["parameters"] == 25_557_032
    assert s["model"] == "resnet50" and s["batch_size"] == 2 and s["framework"] == "mxnet"
    thr = s["metrics"]["throughput"]
    assert thr["unit"] == "images/s"
    assert s["metrics"]["sample_throughput"]["value"] == pytest.approx(thr["value"], rel=1e-6)
    assert "synthetic ImageNet-like 64x64 crops" in s["data_source"]
