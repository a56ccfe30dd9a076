"""Llama and ViT-B/16 on PyTorch (transformers, torchvision) and TensorFlow (keras-hub): with the same perturbed
weights moved through the canonical layout, the same outputs (tests/test_cross_framework.py checks the same network,
the FLOPs of parity.py's closed form and the outputs of the weights as built, for these as for every model). Needs
the PyTorch and TensorFlow stacks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from framework_parity import framework_differences
from tbdkit.bench.cross_framework import DescribeServers
from tbdkit.spec import catalog

MODELS = ("llama", "vit")


def describe_in_stack(servers: DescribeServers, model: str, framework: str, folder: Path, *args: str) -> None:
    """`python -m tbdkit.describe` of the smoke preset in the framework's stack, through its describe server (one
    process a framework, the framework imported once for every describe); `args` add e.g. `--save PATH` (canonical
    weights and the probe batch's outputs) or `--weights-from PATH`."""
    argv = ["--model", model, "--framework", framework, "--preset", "smoke", *args]
    code, _, stderr = servers.describe(framework, argv, folder)
    assert code == 0, stderr[-3000:]


def assert_read_back(reference: Path, out: Path) -> Any:
    """The weights a framework saved to `out` after loading `reference` are `reference`'s, unchanged; the loaded `out`."""
    theirs, ours = np.load(reference), np.load(out)
    for key in (k for k in theirs.files if "/" in k):
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    return ours


def perturbed(reference: Path, out: Path) -> Path:
    """`reference`'s canonical weights, each moved by Gaussian noise (std 0.1, seed 0): torchvision's ViT head
    starts at zero and the norms' scales at one, so outputs of the weights as built would not tell a head or a
    scale moved to the wrong place."""
    rng = np.random.default_rng(0)
    with np.load(reference) as ref:
        np.savez(out, **{k: ref[k] + rng.normal(0.0, 0.1, ref[k].shape).astype(ref[k].dtype)
                         for k in ref.files if "/" in k})
    return out


@pytest.fixture(scope="module")
def described(
    tmp_path_factory: pytest.TempPathFactory, describe_servers: DescribeServers
) -> dict[str, dict[str, Any]]:
    """Each model described on PyTorch (saving its weights), then on both frameworks from the same perturbed
    weights (each reads them back unchanged and saves its outputs on the probe batch); for each model, each
    framework's saved weights and outputs."""
    out: dict[str, dict[str, Any]] = {}
    servers = describe_servers  # the worker's, shared with test_cross_framework.py (tests/conftest.py)
    for model in MODELS:
        folder = tmp_path_factory.mktemp(model)
        describe_in_stack(servers, model, "pytorch", folder, "--save", str(folder / "built.npz"))
        given = perturbed(folder / "built.npz", folder / "given.npz")
        out[model] = {}
        for fw in ("pytorch", "tensorflow"):
            path = folder / f"{fw}.npz"
            describe_in_stack(servers, model, fw, folder, "--weights-from", str(given), "--save", str(path))
            out[model][fw] = assert_read_back(given, path)
    return out


def test_llama_and_vit_run_on_pytorch_and_tensorflow_only():
    for model in MODELS:
        assert list(catalog.get(model).frameworks) == ["pytorch", "tensorflow"], model
        (entry,) = [d for d in framework_differences(model) if d["what"] == "frameworks"]
        assert "archived" in entry["mxnet"] and "keras-hub" in entry["tensorflow"], model


@pytest.mark.parametrize("model", MODELS)
def test_same_weights_same_outputs(described, model):
    """The same perturbed weights give the same logits (Llama: every token's over the vocabulary; ViT: each image's
    classes) to 1e-4 of their largest value: RoPE's scaling, grouped-query attention, the tied projection, the
    class token and positions, all mapped alike."""
    ours, theirs = described[model]["tensorflow"], described[model]["pytorch"]
    name = "logits" if model == "llama" else "output"
    scale = float(np.abs(theirs[name]).max())
    assert scale > 0.1  # not outputs that vanish whatever the weights
    np.testing.assert_allclose(ours[name], theirs[name], rtol=0, atol=1e-4 * scale)
