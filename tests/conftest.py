"""Fixtures shared by the tests (NumPy only at import: this runs in every environment)."""

import numpy as np
import pytest

from scheduling import is_serial, longest_first, unit_of


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """tests/scheduling.py's tests are marked `serial` (`make test` runs them alone, after the others), and
    its longest units are moved to the front (a unit's tests keep their order)."""
    for item in items:
        function = getattr(item, "originalname", item.name)
        if is_serial(item.path.name, function):
            item.add_marker(pytest.mark.serial)
    order = {nodeid: i for i, nodeid in enumerate(longest_first([item.nodeid for item in items]))}
    items.sort(key=lambda item: order[item.nodeid])


@pytest.hookimpl(optionalhook=True)  # xdist's hook: without xdist, nothing calls it
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """With `--dist loadfile` (as `make test` runs), a worker takes tests/scheduling.py's units: a file, or
    one catalog model's tests of a stack with its own file (they share that model's kept training runs)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ByUnit(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return ByUnit(config, log)


@pytest.fixture(scope="session")
def small_sweep(tmp_path_factory):
    """model_checks.SMALL_SWEEP: (its results folder, the finished `tbdkit sweep` process), run once for
    the session (tests/test_sweep_cli.py checks the sweep, tests/test_report_e2e.py reports over it);
    a test that adds runs works on a copy."""
    from model_checks import SMALL_SWEEP, tbdkit

    results = tmp_path_factory.mktemp("sweep") / "results"
    return results, tbdkit(*SMALL_SWEEP, "--results", str(results))


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
