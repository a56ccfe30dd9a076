"""Every TensorFlow model of the catalog (each workloads/<model>/tensorflow.py) passes the checks all models share:
it learns on a fixed batch, steps in each math mode, has the smoke preset's parameter count, and its
file holds only model code. The per-model data (batch sizes, steps, tolerances) is in tests/model_checks.py;
what is specific to one model is in tests/tensorflow/test_<model>_tensorflow.py. A new workload folder is picked up
here by itself (and fails until its rows are added)."""

import math

import pytest

from model_checks import (LEARNING, MATH_MODES, SMOKE_PARAMETERS, Elsewhere, assert_elsewhere,
                          assert_workload_file_is_clean, fp32_adapter, learned, models_on, release, row, stepped)

FRAMEWORK = "tensorflow"


@pytest.fixture(scope="module", params=models_on(FRAMEWORK))
def name(request):
    """One model at a time (a module-scoped parameter groups its tests), its kept runs freed after them."""
    yield request.param
    release(request.param, FRAMEWORK)


def test_learns_on_a_fixed_batch(name):
    spec = row(LEARNING, "LEARNING", FRAMEWORK, name)
    if isinstance(spec, Elsewhere):
        assert_elsewhere(name, FRAMEWORK, spec)
        return
    for variant in spec.variants:
        assert len(learned(name, FRAMEWORK, variant).losses) == spec.steps


def test_every_math_mode_steps(name):
    spec = row(MATH_MODES, "MATH_MODES", FRAMEWORK, name)
    if isinstance(spec, Elsewhere):
        assert_elsewhere(name, FRAMEWORK, spec)
        return
    losses = {mode: loss for mode, (_, loss) in stepped(name, FRAMEWORK).items()}
    assert set(losses) == set(spec.modes) and all(math.isfinite(x) for x in losses.values()), losses
    assert not spec.positive or all(x > 0 for x in losses.values()), losses


def test_smoke_parameter_count(name):
    assert name in SMOKE_PARAMETERS, f"add {name}'s smoke-preset parameter count to SMOKE_PARAMETERS"
    assert fp32_adapter(name, FRAMEWORK).model_info()["parameters"] == SMOKE_PARAMETERS[name]


def test_workload_file_holds_only_model_code(name):
    assert_workload_file_is_clean(name, FRAMEWORK)
