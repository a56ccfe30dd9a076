"""RunSpec validation: invalid specs fail before anything runs, naming the field and what it allows."""

import pytest

from tbdkit.spec import catalog
from tbdkit.spec import run_spec as spec
from tbdkit.core.errors import UserError


def build(**kw):
    return spec.build(**{"model": "deepspeech2", "batch_size": 4, **kw})


def test_defaults_and_preset_policy():
    s = build()
    assert (s.framework, s.precision, s.preset, s.device, s.launcher, s.data) == (
        "pytorch", "fp32", "smoke", "auto", "native", "synthetic")
    assert s.measure.max_measure_s == spec.PRESET_POLICY["smoke"]["max_measure_s"]
    assert build(preset="paper").measure.max_measure_s == spec.MeasurePolicy().max_measure_s
    assert build(measure={"max_measure_s": 7.0}).measure.max_measure_s == 7.0


@pytest.mark.parametrize("fields, words", [
    ({"batch_size": 0}, ["batch_size", "whole number from 1 to 65,536"]),
    ({"batch_size": -3}, ["batch_size"]),
    ({"model": "alexnet"}, ["model", "deepspeech2", "alexnet"]),
    ({"precision": "fp16"}, ["precision", "'fp32', 'tf32', 'amp', 'bf16' or 'fp8'"]),
    ({"precision": "fp8", "framework": "tensorflow"}, ["precision: fp8 trains through PyTorch's torchao", "--framework pytorch"]),
    ({"graph": "jit"}, ["graph", "'standard' or 'compiled'"]),
    ({"preset": "huge"}, ["preset", "'smoke', 'paper' or 'converge'"]),
    ({"launcher": "k8s"}, ["launcher", "'native', 'docker', 'netns' or 'slurm'"]),
    ({"device": "tpu"}, ["device", "auto, cpu, cuda or cuda:N"]),
    ({"data": "/no/such/LibriSpeech"}, ["data", "/no/such/LibriSpeech", "does not exist"]),
    ({"measure": {"target_ci": 2}}, ["measure.target_ci"]),
    ({"colour": "red"}, ["colour"]),
])
def test_invalid_specs_name_the_field(fields, words):
    with pytest.raises(UserError) as err:
        build(**fields)
    message = str(err.value)
    assert message.startswith("Invalid run spec:")
    for word in words:
        assert word in message


def test_round_trip_through_json(tmp_path):
    s = build(batch_size=8, precision="tf32", seed=7)
    path = tmp_path / "spec.json"
    path.write_text(s.to_json())
    assert spec.load(path) == s


def test_framework_the_model_lacks_names_the_field(tmp_path, monkeypatch):
    folder = tmp_path / "ds2_pytorch"  # a model of the user's: Deep Speech 2 on PyTorch only
    folder.mkdir()
    source = catalog.get("deepspeech2").folder
    for name in ("workload.toml", "data.py", "pytorch.py"):
        (folder / name).write_text((source / name).read_text().replace('name = "deepspeech2"', 'name = "ds2_pytorch"'))
    monkeypatch.setenv("TBDKIT_WORKLOAD_PATH", str(tmp_path))
    with pytest.raises(UserError) as err:
        build(model="ds2_pytorch", framework="tensorflow")
    for word in ("framework", "no 'tensorflow' implementation", "pytorch"):
        assert word in str(err.value)
