"""Every framework of a model, side by side: the same network (parity of `tbdkit describe`) and
one `tbdkit bench --framework all` table. Needs every stack installed (`make test` sets them up)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

from tbdkit import catalog

MODEL = catalog.get("deepspeech2")
FRAMEWORKS = list(MODEL.frameworks)


def tbdkit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tbdkit.cli", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def described() -> dict[str, dict]:
    out = {}
    for fw in FRAMEWORKS:
        proc = tbdkit("describe", "deepspeech2", "--framework", fw, "--preset", "smoke", "--json")
        assert proc.returncode == 0, proc.stderr
        out[fw] = json.loads(proc.stdout)
    return out


def test_deepspeech2_has_all_three_frameworks():
    assert FRAMEWORKS == ["pytorch", "tensorflow", "mxnet"]


def expected_forward_flops(hp) -> int:
    """Forward FLOPs of one reference sample from the hyperparameters alone (2 per multiply-accumulate)."""
    def out(n, k, s):
        return (n + 2 * (k // 2) - k) // s + 1
    frames = 1 + (round((hp["duration_typical_low_s"] + hp["duration_typical_high_s"]) / 2 * 16000) - 320) // 160
    (k1f, k1t), (k2f, k2t) = hp["conv1_kernel"], hp["conv2_kernel"]
    (s1f, s1t), (s2f, s2t) = hp["conv1_stride"], hp["conv2_stride"]
    c, f1, t1 = hp["conv_channels"], out(hp["frequency_bins"], k1f, s1f), out(frames, k1t, s1t)
    f2, t2 = out(f1, k2f, s2f), out(t1, k2t, s2t)
    macs = c * k1f * k1t * f1 * t1 + c * c * k2f * k2t * f2 * t2
    h, width = hp["rnn_hidden"], c * f2
    for _ in range(hp["rnn_layers"]):
        macs += 2 * t2 * (3 * h * width + 3 * h * h)
        width = 2 * h
    macs += t2 * (2 * h * hp["fc_hidden"] + hp["fc_hidden"] * len(hp["alphabet"]))
    return 2 * macs


@pytest.mark.slow
@pytest.mark.parametrize("a, b", list(itertools.combinations(FRAMEWORKS, 2)))
def test_the_same_network_on_each_pair(described, a, b):
    da, db = described[a], described[b]
    assert da["parameters"] == db["parameters"]
    assert [(x["name"], x["params"]) for x in da["layers"]] == [(x["name"], x["params"]) for x in db["layers"]]
    fa, fb = da["flops_per_sample"]["forward"], db["flops_per_sample"]["forward"]
    assert abs(fa - fb) <= 0.01 * max(fa, fb), (fa, fb)


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_flops_match_the_hyperparameters(described, framework):
    forward = described[framework]["flops_per_sample"]["forward"]
    assert forward == pytest.approx(expected_forward_flops(MODEL.hp("smoke")), rel=0.01)
    assert described[framework]["flops_per_sample"]["training"] == 3 * forward


@pytest.mark.slow
def test_layer_order_is_canonical(described):
    names = [x["name"] for x in described["pytorch"]["layers"]]
    assert names == ["conv1", "bn1", "conv2", "bn2", "gru1.forward", "gru1.backward", "gru2.forward",
                     "gru2.backward", "dense1", "dense2"]


@pytest.mark.parametrize("args, words", [
    (["deepspeech2", "--framework", "cntk"], ["Unknown framework 'cntk'"]),
    (["deepspeech2", "--preset", "huge"], ["no preset 'huge'", "smoke"]),
    (["alexnet"], ["Unknown model 'alexnet'"]),
])
def test_describe_errors_are_one_sentence(args, words):
    proc = tbdkit("describe", *args)
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr.replace("\n", " ")


def test_describe_without_the_stack_says_how(tmp_path):
    proc = tbdkit("describe", "deepspeech2", "--framework", "mxnet", env={"TBDKIT_VENVS": str(tmp_path)})
    assert proc.returncode == 2 and "tbdkit setup mxnet" in proc.stderr


@pytest.mark.slow
def test_bench_all_frameworks_prints_one_table(tmp_path):
    results = tmp_path / "r"
    proc = tbdkit("bench", "--model", "deepspeech2", "--framework", "all", "--preset", "smoke", "--device", "cpu",
                  "--batch", "2", "--max-warmup-s", "3", "--max-measure-s", "4", "--results", str(results), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summaries = json.loads(proc.stdout)  # --json: stdout is only the summaries (progress goes to stderr)
    assert [s["framework"] for s in summaries] == FRAMEWORKS
    for s in summaries:
        assert s["status"] == "ok" and s["metrics"]["throughput"]["value"] > 0, s
        assert s["model_info"]["parameters"] == summaries[0]["model_info"]["parameters"]
        assert s["loss"]["last"] is not None
    envs = {s["framework"]: json.loads((results / s["run_id"] / "env.json").read_text())["framework"]
            for s in summaries}
    assert envs["tensorflow"]["framework_version"] == "2.21.0" and envs["mxnet"]["framework_version"] == "1.9.1"
    assert envs["tensorflow"]["math_mode"]["tf32_matmul"] is False
    assert envs["mxnet"]["math_mode"]["nvidia_tf32_override"] == "0"


@pytest.mark.slow
def test_state_differences_are_the_listed_ones(described):
    import tomllib

    listed = tomllib.loads((MODEL.folder / "workload.toml").read_text())["framework_difference"]
    (entry,) = [d for d in listed if "smoke_state_values" in d]
    assert {fw: described[fw]["framework_state"]["non_trainable_state"] for fw in FRAMEWORKS} == entry["smoke_state_values"]


def describe_in_stack(model: str, framework: str, *args: str) -> None:
    """`python -m tbdkit.describe` for one model in the framework's own stack venv."""
    from tbdkit import stacks

    subprocess.run([str(stacks.python_of(framework)), "-m", "tbdkit.describe", "--model", model,
                    "--framework", framework, *args], check=True, capture_output=True, env=stacks.agent_env())


def save_pytorch_weights(model: str, path) -> None:
    describe_in_stack(model, "pytorch", "--save", str(path))


def assert_same_sequence_outputs(model: str, framework: str, pytorch_weights, out) -> None:
    """PyTorch's weights (saved by save_pytorch_weights), moved through the canonical layout into
    `framework`, read back unchanged and give the same log-probabilities (to 1e-4) on the same
    sequences, each compared over its own length."""
    import numpy as np

    describe_in_stack(model, framework, "--weights-from", str(pytorch_weights), "--save", str(out))
    theirs, ours = np.load(pytorch_weights), np.load(out)
    for key in (k for k in theirs.files if "/" in k):  # read back from the framework after loading
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    assert ours["lengths"].tolist() == theirs["lengths"].tolist()
    for i, n in enumerate(theirs["lengths"]):
        np.testing.assert_allclose(ours["log_probs"][i, :n], theirs["log_probs"][i, :n], atol=1e-4)


@pytest.fixture(scope="module")
def pytorch_weights(tmp_path_factory):
    path = tmp_path_factory.mktemp("weights") / "pytorch.npz"
    save_pytorch_weights("deepspeech2", path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_same_weights_same_outputs(pytorch_weights, tmp_path, framework):
    """PyTorch's weights, moved through the canonical layout into the other framework, give the same
    log-probabilities on the same two utterances: the same network, numerically."""
    assert_same_sequence_outputs("deepspeech2", framework, pytorch_weights, tmp_path / f"{framework}.npz")
