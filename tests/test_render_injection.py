"""Launch files take nothing raw: image references are checked against the OCI grammar before
anything is rendered, every value a shell reads is shell-quoted, every YAML string is one
serialized scalar, so no --image, TBDKIT_IMAGE_* or path can add a command or a YAML key."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from tbdkit.launch import render
from tbdkit.spec import run_spec as specs
from tbdkit.core.errors import UserError
from tbdkit.env.oci import validate_image_reference

VALID = ["ubuntu", "tbdkit/pytorch:0.1.0", "nvcr.io/nvidia/pytorch:24.05-py3", "localhost:5000/a/b_c__d-e.f:T_1",
         "[::1]:5000/x/y:latest", "Registry.Example.com/team/img", "a@sha256:" + "0" * 64,
         "docker.io/library/busybox:1.36@sha256:" + "ab" * 32]
INVALID = ["x; touch PWNED; echo $(id)", "x\nprivileged: true", "ubuntu\n", "", " ubuntu", "Ubuntu/Img",
           "a:tag with space", "-x", "x@sha256:abc", "x:" + "t" * 129, "a/../b", "a//b", "a:b:c", "a$(id)",
           "x' ; id ; '", "a" * 256]
ATTACK = "x; touch PWNED; echo $(id)"


@pytest.mark.parametrize("ref", VALID)
def test_valid_references_pass_unchanged(ref):
    assert validate_image_reference(ref) == ref


@pytest.mark.parametrize("ref", INVALID)
def test_invalid_references_are_one_user_error(ref):
    with pytest.raises(UserError, match="image"):
        validate_image_reference(ref)


def _spec():
    return specs.build(model="resnet50", batch_size=64, preset="paper", launcher="netns", nodes=2, gpus_per_node=1)


@pytest.mark.parametrize("target", list(render.TARGETS))
@pytest.mark.parametrize("image", [ATTACK, "x\nprivileged: true", "tbdkit/pytorch:1\n        privileged: true"])
def test_a_bad_image_is_refused_before_anything_is_written(tmp_path, target, image):
    with pytest.raises(UserError, match="not a container image reference"):
        render.write(_spec(), target, tmp_path / "out", image=image)
    assert not (tmp_path / "out").exists()


def test_the_image_of_the_environment_is_checked_too(monkeypatch):
    monkeypatch.setenv("TBDKIT_IMAGE_PYTORCH", "evil\nsecurityContext: {privileged: true}")
    with pytest.raises(UserError, match="not a container image reference"):
        render.render(_spec(), "k8s")


def test_render_cli_refuses_the_reported_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "render", "--target", "slurm", "--image", ATTACK,
                           "-o", "r"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "not a container image reference" in proc.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "PWNED").exists()


def test_shell_values_reach_the_command_as_one_word_each(tmp_path):
    """The torchrun script run for real, with a results path and python full of shell syntax."""
    results = tmp_path / "res $(touch PWNED1); touch PWNED2 `id` 'q\""
    python = tmp_path / "py thon; touch PWNED3"
    # the stand-in python prints its argv; as the script's progress printer (tbdkit.launch.human) it passes
    # what it reads through, so the torchrun line reaches stdout as it was
    python.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      "if 'tbdkit.launch.human' in sys.argv: sys.stdout.write(sys.stdin.read())\n"
                      "else: print(json.dumps(sys.argv[1:]))\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    path = render.write(_spec(), "torchrun", tmp_path / "job", results=str(results), python=str(python),
                        run_id="job-1")
    proc = subprocess.run(["bash", str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "RESULTS": ""})
    assert proc.returncode == 0, proc.stderr
    argv, finish = (json.loads(line) for line in proc.stdout.splitlines())  # torchrun, then node 0's finish
    assert argv[argv.index("--run-dir") + 1] == f"{results}/job-1"
    assert finish[finish.index("--run-dir") + 1] == f"{results}/job-1"
    assert (results / "job-1" / "spec.json").is_file()
    assert not list(tmp_path.rglob("PWNED*"))


def test_slurm_script_quotes_and_passes_bash_n(tmp_path):
    path = render.write(_spec(), "slurm", tmp_path, image="tbdkit/pytorch:0.1.0", results="a b;c", run_id="j1")
    text = path.read_text()
    assert "DEFAULT_RESULTS='a b;c'" in text and "DEFAULT_IMAGE=tbdkit/pytorch:0.1.0\n" in text
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


@pytest.mark.parametrize("target", ["k8s", "compose"])
def test_yaml_files_hold_exactly_the_expected_keys(tmp_path, target):
    results = "res\n    privileged: true\n# $HOME"
    text = render.render(_spec(), target, image="tbdkit/pytorch:0.1.0", results=results, run_id="j1")
    docs = list(yaml.safe_load_all(text))
    if target == "k8s":
        (container,) = docs[2]["spec"]["template"]["spec"]["containers"]
        assert set(container) == {"name", "image", "command", "args", "resources", "volumeMounts"}
        assert container["image"] == "tbdkit/pytorch:0.1.0"
        assert "privileged" not in text.replace("\\n", "")
    else:
        for service in docs[0]["services"].values():
            assert set(service) <= {"image", "user", "ipc", "shm_size", "environment", "command", "volumes", "deploy"}
            # compose reads `$$` as one literal `$`
            assert service["volumes"][1] == f"./{results}:/results".replace("$", "$$")
            assert service["image"] == "tbdkit/pytorch:0.1.0"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_a_yaml_scalar_reads_back_as_the_same_string(value):
    text = render.yaml_scalar(value)
    assert "\n" not in text
    assert yaml.safe_load(f"key: {text}\nother: 1\n") == {"key": value, "other": 1}
