"""Checks the TensorFlow and MXNet workload tests share (imported by tests/<stack>/, run in that
stack): an adapter on the CPU, a smoke run that learns, a workload file free of timing and logging,
checks of a workload's `forward` (which hands back NumPy in every framework), and NumPy references
of what several frameworks rebuild (torchvision's RoI align, the Transformer's size and loss)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from tbdkit import catalog
from tbdkit.adapters import load

FORBIDDEN = (r"\bimport time\b", r"\blogging\b", r"\bprint\(", r"profiler", r"perf_counter", r"tbdkit")


def adapter(name: str, framework: str, hp: dict[str, Any] | None = None, precision: str = "fp32") -> Any:
    """The `framework` adapter of workload `name` on the CPU, seed 0 (the smoke preset unless `hp` is given)."""
    model = catalog.get(name)
    return load(framework, workload=catalog.load_module(model, framework), hp=hp or model.hp("smoke"),
                device="cpu", precision=precision, seed=0)



def assert_capabilities(framework: str, expected: set[str]) -> None:
    """The framework's adapter (A3C's, on the CPU) implements the core protocol and exactly the
    optional capabilities named (tbdkit.adapters.Capabilities' fields)."""
    from tbdkit import adapters

    a = adapter("a3c", framework)
    caps = adapters.capabilities(a)
    assert isinstance(a, adapters.Adapter)
    assert {f for f in caps.__dataclass_fields__ if getattr(caps, f) is a} == expected

def assert_learns(a: Any, data: Any, hp: dict[str, Any], batch_size: int, steps: int, factor: float) -> list[float]:
    """`steps` steps through the adapter on one synthetic batch (seed 1): finite losses, the last below
    factor x the first."""
    inputs = a.prepare(next(data.batches("synthetic", hp, batch_size, seed=1)))
    losses = [a.loss_value(a.step(inputs)) for _ in range(steps)]
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0] * factor, losses
    return losses


def assert_workload_file_is_clean(name: str, framework: str) -> None:
    """A workload file holds only the model, optimizer and train step: no timing, logging or profiling."""
    source = (catalog.get(name).folder / f"{framework}.py").read_text()
    for forbidden in FORBIDDEN:
        assert not re.search(forbidden, source), forbidden


def torchvision_roi_align(feats, roi, size, scale, grid):
    """torchvision's roi_align kernel (aligned=False) for one RoI on (C, H, W) features, in NumPy."""
    height, width = feats.shape[1:]

    def bilinear(y, x):
        if y < -1.0 or y > height or x < -1.0 or x > width:
            return np.zeros(feats.shape[0])
        y, x = max(y, 0.0), max(x, 0.0)
        y0, x0 = int(y), int(x)
        if y0 >= height - 1:
            y0 = y1 = height - 1
            y = float(y0)
        else:
            y1 = y0 + 1
        if x0 >= width - 1:
            x0 = x1 = width - 1
            x = float(x0)
        else:
            x1 = x0 + 1
        ly, lx = y - y0, x - x0
        return ((1 - ly) * (1 - lx) * feats[:, y0, x0] + (1 - ly) * lx * feats[:, y0, x1]
                + ly * (1 - lx) * feats[:, y1, x0] + ly * lx * feats[:, y1, x1])

    x1, y1, x2, y2 = roi * scale
    bw, bh = max(x2 - x1, 1.0) / size, max(y2 - y1, 1.0) / size
    gh, gw = grid if grid else (math.ceil(max(y2 - y1, 1.0) / size), math.ceil(max(x2 - x1, 1.0) / size))
    out = np.zeros((feats.shape[0], size, size))
    for py in range(size):
        for px in range(size):
            out[:, py, px] = np.mean([bilinear(y1 + py * bh + (iy + 0.5) * bh / gh, x1 + px * bw + (ix + 0.5) * bw / gw)
                                      for iy in range(gh) for ix in range(gw)], axis=0)
    return out


def assert_same_frames_for_the_same_seed(frames: Callable[[], np.ndarray]) -> None:
    """A3C: `frames()` (an actor's observations for a fixed seed and actions) played twice is the same
    twice, and not blank: the environment runs in this stack and is deterministic."""
    first, second = frames(), frames()
    np.testing.assert_array_equal(first, second)
    assert first.max() > 0


def assert_padding_does_not_change_an_utterance(a: Any, workload: Any, data: Any, hp: dict[str, Any],
                                                padded: Callable[..., Any]) -> None:
    """Deep Speech 2: one utterance (seed 3) padded by `padded(data, batch, noise)` (tests/conftest.py's
    padded_utterance) with zeros, then with loud noise, gives the same log-probabilities over its own
    output frames."""
    batch = next(data.synthetic_batches(hp, 1, seed=3))
    frames = int(batch.feature_lengths[0]) // 2
    quiet, noisy = (workload.forward(a.training, a.prepare(padded(data, batch, n)))[0] for n in (False, True))
    np.testing.assert_allclose(quiet[0, :frames], noisy[0, :frames], atol=1e-5)


def assert_translation_outputs(a: Any, workload: Any, data: Any, hp: dict[str, Any]) -> None:
    """Seq2Seq: forward on a synthetic batch of 3 gives log-probabilities (N, T, target vocabulary) that
    sum to one, and each sentence's target length."""
    batch = next(data.synthetic_batches(hp, 3, seed=0))
    log_probs, lengths = workload.forward(a.training, a.prepare(batch))
    assert log_probs.shape == (*batch.target_in.shape, hp["target_vocab_size"])
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, atol=1e-4)
    assert lengths.tolist() == batch.target_lengths.tolist()


def assert_padding_does_not_change_a_sentence(a: Any, workload: Any, data: Any, hp: dict[str, Any]) -> None:
    """Seq2Seq: a sentence (seed 3, a batch of one: no padding of its own) with 7 junk tokens appended
    beyond its length gives the same log-probabilities."""
    batch = next(data.synthetic_batches(hp, 1, seed=3))
    n = int(batch.source_lengths[0])
    junk = np.concatenate([batch.source, np.full((1, 7), 5, np.int64)], axis=1)
    padded = data.Batch(junk, batch.source_lengths, batch.target_in, batch.target_out, batch.target_lengths)
    quiet, noisy = (workload.forward(a.training, a.prepare(b))[0] for b in (batch, padded))
    assert junk.shape[1] == n + 7
    np.testing.assert_allclose(quiet, noisy, atol=1e-5)


def transformer_parameters(hp: dict[str, Any]) -> int:
    """The Transformer's trainable parameters from its hyperparameters: attention 4 (d x d + d); FFN
    d x f + f + f x d + d; LayerNorm 2d; one d x V table shared by both embeddings and the projection."""
    d, f = hp["d_model"], hp["ffn_hidden"]
    attention, ffn, norm = 4 * (d * d + d), d * f + f + f * d + d, 2 * d
    return (hp["encoder_layers"] * (attention + ffn + 2 * norm) + hp["decoder_layers"] * (2 * attention + ffn + 3 * norm)
            + hp["source_vocab_size"] * d)


def smoothed_cross_entropy_case() -> tuple[np.ndarray, np.ndarray, float, float]:
    """Logits (2, 3, 5), labels with -100 ignored, epsilon 0.1 and, in NumPy, the mean over the labelled
    positions of PyTorch's label-smoothed cross-entropy: (1 - e) x NLL + e x the mean of -log p."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
    labels = np.array([[1, 4, -100], [0, -100, -100]])
    e = 0.1
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    per = [(1 - e) * -logp[i, j, labels[i, j]] - e * logp[i, j].mean() for i, j in zip(*np.nonzero(labels >= 0))]
    return logits, labels, e, float(np.mean(per))
