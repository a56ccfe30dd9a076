"""Helpers shared by the framework stacks' tests (NumPy only: this runs in every environment)."""

import numpy as np
import pytest


def _padded(data, batch, noise: bool):
    """The batch's one utterance with 200 frames of padding: zeros for the 30 frames the convolutions
    reach past its end, then zeros or (noise=True) loud noise that a correct network never reads."""
    n = int(batch.feature_lengths[0])
    features = np.zeros((1, 1, batch.features.shape[2], n + 200), np.float32)
    features[0, 0, :, :n] = batch.features[0, 0, :, :n]
    if noise:
        features[0, 0, :, n + 30:] = np.random.default_rng(9).normal(0.0, 3.0, (features.shape[2], 170))
    return data.Batch(features, batch.feature_lengths, np.ones(2, np.int32), np.array([2], np.int32),
                      batch.durations_s)


@pytest.fixture
def padded_utterance():
    return _padded


def _losses_fall(adapter, data, hp, steps: int = 8) -> list[float]:
    """Trains `steps` steps on one synthetic batch of 4 through the adapter; the loss must be finite and fall."""
    inputs = adapter.prepare(next(data.synthetic_batches(hp, 4, seed=1)))
    losses = [adapter.loss_value(adapter.step(inputs)) for _ in range(steps)]
    assert all(np.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] * 0.99, losses
    return losses


@pytest.fixture
def losses_fall():
    return _losses_fall


def _pong_frames(data, hp, seed: int = 5, steps: int = 6) -> np.ndarray:
    """A3C: the observations one actor sees over `steps` actions drawn from fixed logits."""
    actors = data.Actors(hp, 1, seed=seed)
    try:
        out = [actors.observation]
        for _ in range(steps):
            out.append(actors.step(actors.sample(np.array([[0.0, 1.0, 2.0, 0.0, 0.0, 0.0]])))[0])
        return np.stack(out)
    finally:
        actors.close()


@pytest.fixture
def pong_frames():
    return _pong_frames


def _plain_workload(model, framework: str) -> None:
    """A workload file holds only the model, optimizer and train step: no timing, logging or profiling."""
    import re

    source = (model.folder / f"{framework}.py").read_text()
    for forbidden in (r"\bimport time\b", r"\blogging\b", r"\bprint\(", r"profiler", r"perf_counter", r"tbdkit"):
        assert not re.search(forbidden, source), forbidden


@pytest.fixture
def plain_workload():
    return _plain_workload
