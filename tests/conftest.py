"""Fixtures shared by the tests (NumPy only at import: this runs in every environment)."""

import numpy as np
import pytest

# Test files that must run alone (`make test` runs them after the rest, which go on two workers):
# each measures time or CPU share, or holds something machine-wide. A neighbouring test's load would
# shift their numbers or mark their runs disturbed.
SERIAL: dict[str, str] = {
    "test_calibrate.py": "busy threads, an idle process and an A/A overhead, timed",
    "test_calibrate_flops.py": "times kernels against their known FLOPs",
    "test_calibrate_gpu.py": "the GPU probes' busy and idle windows",
    "test_collectors.py": "the CPU collector against this process's own clock",
    "test_compare.py": "two runs of one spec must agree within their CIs",
    "test_disturbed.py": "runs must see no foreign CPU load",
    "test_energy.py": "RAPL energy over idle and busy windows",
    "test_distributed.py": "network namespaces and shaped links: data-parallel throughput",
    "test_distributed_roles.py": "network namespaces",
    "test_distributed_tf_mxnet.py": "network namespaces and shaped links; runs expected undisturbed",
    "test_netns_gpus.py": "network namespaces",
    "test_sweep_cli.py": "a killed sweep's finished run indexed ok; memory limits under load",
    "test_bench_cli.py": "a complete run has a throughput CI and status ok (disturbed beside a neighbour)",
    "test_report_e2e.py": "its runs must be undisturbed, or the report keeps them out of its figures",
    # the stacks' suites
    "test_memory_mxnet.py": "exact bytes from MXNet's storage profiler: beside another worker a freed "
    "output was at times still counted at the record scope's end (3 of 9 runs)",
    "test_memory_tensorflow.py": "exact bytes from TensorFlow's allocator statistics",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SERIAL:
            item.add_marker(pytest.mark.serial)


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
