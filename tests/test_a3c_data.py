"""A3C's framework-neutral half: DeepMind preprocessing in NumPy, and the data-source rules
(the live environment only). The environment itself is tested in tests/pytorch, where ale-py is."""

import sys

import numpy as np
import pytest

from model_checks import hparams, load_data

data = load_data("a3c")
HP = hparams("a3c", "smoke")


def test_resize_keeps_constants_and_order():
    assert np.all(data.resize(np.full((210, 160), 87, np.uint8), 84, 84) == 87)
    ramp = np.tile(np.arange(160, dtype=np.uint8), (210, 1))
    out = data.resize(ramp, 84, 84)
    assert out.shape == (84, 84) and out.dtype == np.uint8
    assert np.all(np.diff(out[0].astype(int)) > 0) and np.all(out == out[0])
    assert out[0, 0] <= 2 and out[0, -1] >= 157
    square = np.arange(84 * 84, dtype=np.uint8).reshape(84, 84)
    np.testing.assert_array_equal(data.resize(square, 84, 84), square)


def test_preprocess_max_pools_two_frames_against_flicker():
    a, b = np.zeros((210, 160), np.uint8), np.zeros((210, 160), np.uint8)
    a[20:60, 10:50] = 200        # an object drawn only in the even frame
    b[150:190, 100:140] = 120    # another drawn only in the odd frame
    out = data.preprocess((a, b), HP)
    assert out.shape == (84, 84)
    assert out[16, 12] == 200 and out[68, 60] == 120 and out[40, 40] == 0


def test_a_dataset_path_is_refused(tmp_path):
    with pytest.raises(data.DataError, match="A3C reads no dataset .*: its data is the live ALE/Pong-v5 environment, "
                                            "so run it without DATA"):
        data.check_source(str(tmp_path), HP)
    with pytest.raises(data.DataError):
        next(data.batches(str(tmp_path), HP, 2, 0))


def test_missing_emulator_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)   # import ale_py now fails
    with pytest.raises(data.DataError, match="needs gymnasium and ale-py .*: run `tbdkit setup FRAMEWORK`"):
        data.check_source("synthetic", HP)


def test_actions_are_drawn_in_numpy_from_the_softmax():
    """The same logits and seed give the same actions in every framework; the draws follow softmax."""
    logits = np.tile(np.log([0.5, 0.25, 0.125, 0.125, 1e-9, 1e-9]), (20000, 1))
    first = data.sample_actions(logits, np.random.default_rng([3, 1]))
    np.testing.assert_array_equal(first, data.sample_actions(logits, np.random.default_rng([3, 1])))
    assert first.dtype == np.int64 and first.shape == (20000,)
    freq = np.bincount(first, minlength=6) / len(first)
    np.testing.assert_allclose(freq, [0.5, 0.25, 0.125, 0.125, 0, 0], atol=0.012)
    assert data.sample_actions(np.array([[0.0, 50.0, 0.0]]), np.random.default_rng(0)).tolist() == [1]


def test_describe_reference_is_one_observation():
    ref, probe = data.reference_batch(HP), data.probe_batch(HP)
    assert ref.features.shape == (1, 4, 84, 84) and ref.features.dtype == np.uint8 and ref.work == 1.0
    assert probe.features.shape == (2, 4, 84, 84)
    np.testing.assert_array_equal(probe.features, data.probe_batch(HP).features)


def test_throughput_counts_observations_and_frames_are_a_named_secondary_metric():
    """The paper counts input samples per second: A3C's throughput is agent steps (the observations
    the network consumes), with emulator frames (x action repeat) as `frames_throughput`, in frames/s."""
    from types import SimpleNamespace

    from tbdkit.spec import catalog
    from tbdkit.agent.loop import Iteration, RunningRatio, throughput_metrics

    model = catalog.get("a3c")
    batch = data.Batch(SimpleNamespace(pipes=[None, None]), int(HP["t_max"]), int(HP["frame_skip"]))
    assert batch.samples == 2 * 5 and batch.work == 10.0 and batch.extra_work == {"frames": 40.0}
    assert model.throughput_unit == model.sample_unit == "steps/s"
    window = [Iteration(i, "measure", 0.5 * i, 0.5, 0.0, batch.samples, batch.work, None, dict(batch.extra_work))
              for i in range(4)]
    running = RunningRatio()
    for it in window:
        running.add(it.work, it.seconds)
    m = throughput_metrics(window, running.estimate(), model.throughput_unit, model.sample_unit,
                           model.info.get("extra_units", {}))
    assert m["throughput"]["unit"] == "steps/s" and m["throughput"]["value"] == 20.0
    assert m["frames_throughput"]["unit"] == "frames/s" and m["frames_throughput"]["value"] == 80.0
