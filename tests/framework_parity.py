"""Helpers of the host-side parity tests (tests/test_*_frameworks.py, tests/test_parity_rl.py): the kit's
CLI and `python -m tbdkit.describe` run as subprocesses (the latter, and any script, in a framework's
own stack venv), and the checks every such file makes of `describe`'s JSON and saved weights."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from tbdkit.spec import catalog
from tbdkit.env import stacks

from model_checks import tbdkit


def describe_smoke(model: str, framework: str) -> dict[str, Any]:
    """The JSON of `tbdkit describe MODEL --framework FRAMEWORK --preset smoke --json` (which must succeed)."""
    proc = tbdkit("describe", model, "--framework", framework, "--preset", "smoke", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def run_in_stack(framework: str, *args: str) -> str:
    """`python ARGS` in the framework's own stack venv (its agent environment); it must succeed.
    Returns its standard output."""
    proc = subprocess.run([str(stacks.python_of(framework)), *args], capture_output=True, text=True,
                          env=stacks.agent_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def describe_in_stack(model: str, framework: str, *args: str) -> dict[str, Any]:
    """The JSON of `python -m tbdkit.describe` for one model in the framework's own stack venv; `args`
    add e.g. `--save PATH` (canonical weights and the probe batch's outputs) or `--weights-from PATH`."""
    return json.loads(run_in_stack(framework, "-m", "tbdkit.describe", "--model", model, "--framework", framework,
                                   *args))


def assert_same_network(da: dict[str, Any], db: dict[str, Any], also: tuple[str, ...] = ()) -> None:
    """Two frameworks' `describe` JSON show the same network: the same parameter count, the same canonical
    layers (name and parameter shapes, plus the optional layer keys `also`, in order) and forward FLOPs
    per sample within 1%."""
    assert da["parameters"] == db["parameters"]

    def layers(d: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(x["name"], x["params"], *(x.get(key) for key in also)) for x in d["layers"]]

    assert layers(da) == layers(db)
    fa, fb = da["flops_per_sample"]["forward"], db["flops_per_sample"]["forward"]
    assert abs(fa - fb) <= 0.01 * max(fa, fb), (fa, fb)


def assert_smoke_flops(flops: dict[str, int], forward: int, rel: float = 0.01) -> None:
    """`describe`'s `flops_per_sample`: forward within `rel` of `forward` (exactly it where rel is 0),
    training three times forward."""
    if rel:
        assert flops["forward"] == pytest.approx(forward, rel=rel)
    else:
        assert flops["forward"] == forward
    assert flops["training"] == 3 * flops["forward"]


def framework_differences(model: str) -> list[dict[str, Any]]:
    """The `[[framework_difference]]` entries of the model's workload.toml (an empty list where it has none)."""
    return tomllib.loads((catalog.get(model).folder / "workload.toml").read_text()).get("framework_difference", [])


def listed_smoke_state(model: str) -> dict[str, int]:
    """`smoke_state_values` of the one framework difference that has them: each framework's count of
    non-trainable state in the smoke preset."""
    (entry,) = [d for d in framework_differences(model) if "smoke_state_values" in d]
    return entry["smoke_state_values"]


def load_pytorch_weights(model: str, framework: str, reference: Path, out: Path) -> Any:
    """`framework` loads PyTorch's canonical weights (saved by `describe_in_stack(model, "pytorch", "--save",
    reference)`) and saves to `out` the weights it reads back, which must be PyTorch's unchanged, and its
    outputs on the probe batch. Returns the loaded `out` (a NumPy .npz)."""
    describe_in_stack(model, framework, "--weights-from", str(reference), "--save", str(out))
    return assert_read_back(reference, out)


def assert_read_back(reference: Path, out: Path) -> Any:
    """The weights a framework saved to `out` after loading PyTorch's `reference` are PyTorch's, unchanged.
    Returns the loaded `out`."""
    theirs, ours = np.load(reference), np.load(out)
    for key in (k for k in theirs.files if "/" in k):  # read back from the framework after loading
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    return ours


def described_with_pytorch_weights(model: str, frameworks: tuple[str, ...] | list[str], folder: Path) -> dict[str, Any]:
    """`python -m tbdkit.describe` of `model` (the JSON `tbdkit describe --json` prints) in each of `frameworks`,
    PyTorch first, one run each: PyTorch's also saves its canonical weights and its outputs on the probe batch,
    every other framework loads those weights (they must read back unchanged) and saves its own outputs.
    Each JSON gains "npz", the path of its saved file. One run per framework describes the network and
    checks its outputs, where two runs (the CLI's, and one with the weights) did the same work twice."""
    assert frameworks[0] == "pytorch", frameworks
    reference, out = folder / "pytorch.npz", {}
    for fw in frameworks:
        path = folder / f"{fw}.npz"
        args = ["--save", str(path)] + (["--weights-from", str(reference)] if fw != "pytorch" else [])
        out[fw] = describe_in_stack(model, fw, "--preset", "smoke", *args) | {"npz": path}
        if fw != "pytorch":
            assert_read_back(reference, path)
    return out


def pytorch_weights_fixture(model: str) -> Callable[..., Path]:
    """A module-scoped fixture: the path of PyTorch's canonical weights of `model` (and its outputs on
    the probe batch), saved once per test module. Bind it as `pytorch_weights = pytorch_weights_fixture(m)`."""
    @pytest.fixture(scope="module")
    def pytorch_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
        path = tmp_path_factory.mktemp("weights") / "pytorch.npz"
        describe_in_stack(model, "pytorch", "--save", str(path))
        return path

    return pytorch_weights


def assert_same_sequence_outputs(model: str, framework: str, pytorch_weights: Path, out: Path) -> None:
    """PyTorch's weights (from pytorch_weights_fixture), moved through the canonical layout into
    `framework`, read back unchanged and give the same log-probabilities (to 1e-4) on the same
    sequences, each compared over its own length."""
    load_pytorch_weights(model, framework, pytorch_weights, out)
    assert_same_sequence_files(pytorch_weights, out)


def assert_same_sequence_files(pytorch_npz: Path, framework_npz: Path) -> None:
    """The saved log-probabilities of two frameworks (PyTorch's and one that loaded its weights) agree to 1e-4
    on the same sequences, each compared over its own length."""
    theirs, ours = np.load(pytorch_npz), np.load(framework_npz)
    assert ours["lengths"].tolist() == theirs["lengths"].tolist()
    for i, n in enumerate(theirs["lengths"]):
        np.testing.assert_allclose(ours["log_probs"][i, :n], theirs["log_probs"][i, :n], atol=1e-4)
