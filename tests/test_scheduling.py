"""tests/scheduling.py, how `make test` schedules the tests: every serial key and every long unit names
tests that exist (a renamed file or function would otherwise run beside a neighbour, or start last,
without anyone noticing), the units group what shares a process's kept runs, and `make test` keeps one compiled,
one bf16 and one math-mode leg per outcome of each stack."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model_checks import (EVERY_LEG_IN_MAKE_TEST, LEGS, OUTCOME_CELLS, functions_defined, in_make_test, models_on,
                          outcome)
from scheduling import ALL_CORES, LONGEST_FIRST, SERIAL, is_serial, longest_first, serial_files, unit_of

TESTS = Path(__file__).parent


def test_every_key_names_an_existing_file_and_function():
    files = {p.name: p for p in TESTS.rglob("test_*.py")}
    for key, reason in {**SERIAL, **ALL_CORES}.items():
        name, _, function = key.partition("::")
        assert name in files, f"{key}: no such test file"
        assert reason.strip(), f"{key}: say why it runs alone"
        if function:
            assert function in functions_defined(files[name]), f"{key}: {name} has no {function}"


def test_a_file_or_one_function_of_it_is_serial(tmp_path):
    assert is_serial("test_calibrate.py", "test_anything")
    assert is_serial("test_bench_cli.py", "test_bench_writes_a_complete_run")
    assert not is_serial("test_bench_cli.py", "test_ctrl_c_marks_the_run_interrupted")
    (tmp_path / "test_bench_cli.py").write_text("")
    (tmp_path / "test_spec.py").write_text("")
    assert serial_files(tmp_path) == [tmp_path / "test_bench_cli.py"]
    assert [p.name for p in serial_files(TESTS / "pytorch")] == []
    assert [p.name for p in serial_files(TESTS / "mxnet")] == ["test_memory_mxnet.py"]


def test_units_group_a_models_checks_with_its_own_file():
    assert unit_of("tests/tensorflow/test_every_model_tensorflow.py::test_learns_on_a_fixed_batch[wgan_gp]") \
        == unit_of("tests/tensorflow/test_wgan_gp_tensorflow.py::test_shapes") == "tensorflow/wgan_gp"
    assert unit_of("tests/mxnet/test_threads_mxnet.py::test_x") == "mxnet/threads"
    assert unit_of("tests/test_docker_real.py::test_bench_in_a_container") == "test_docker_real.py"
    assert unit_of("tests/test_parity_rl.py::test_the_same_network_on_each_pair[a3c-pytorch-tensorflow]") \
        == "test_parity_rl.py"
    # every model's cross-framework check on one worker, so its describe servers import each stack once
    assert unit_of("tests/test_cross_framework.py::test_the_frameworks_agree[efficientdet]") \
        == unit_of("tests/test_cross_framework.py::test_the_frameworks_agree[resnet50]") == "test_cross_framework.py"
    # the modern models' describes share the cross-framework checks' describe servers: one worker takes both files
    assert unit_of("tests/test_modern_frameworks.py::test_same_weights_same_outputs[llama]") == "test_cross_framework.py"


def test_the_longest_units_start_first_and_the_rest_keep_their_order():
    ids = ["tests/test_a.py::t", "tests/test_b.py::t", "tests/test_docker_real.py::t1", "tests/test_c.py::t",
           "tests/test_docker_real.py::t2"]
    assert longest_first(ids)[:2] == ["tests/test_docker_real.py::t1", "tests/test_docker_real.py::t2"]
    assert longest_first(ids)[2:] == ["tests/test_a.py::t", "tests/test_b.py::t", "tests/test_c.py::t"]


def test_every_long_unit_exists():
    units = {unit_of(f"{p.relative_to(TESTS.parent)}::t") for p in TESTS.rglob("test_*.py")}
    models = {p.parent.name for p in (TESTS.parent / "workloads").glob("*/workload.toml")}
    for unit in LONGEST_FIRST:
        stack, _, model = unit.partition("/")
        assert unit in units or (model in models and stack in ("pytorch", "tensorflow", "mxnet")), unit


AFFINITY_PROBE = """import json, os, subprocess, sys
def _probe(name):
    child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                           capture_output=True, text=True, check=True).stdout
    out = {"worker": os.environ.get("PYTEST_XDIST_WORKER"), "own": sorted(os.sched_getaffinity(0)), "child": child}
    with open(os.path.join(os.environ["PROBE_OUT"], name + ".json"), "w") as f:
        json.dump(out, f)
"""


def test_each_parallel_worker_runs_on_one_core_and_all_cores_tests_get_them_back(tmp_path):
    """With TBDKIT_TEST_ONE_CORE_PER_WORKER=1 (the host suite's parallel pass) each xdist worker, and the
    processes it starts, run on one core of their own; an ALL_CORES test runs on every core, and the next
    test of its worker on that one core again."""
    cores = sorted(os.sched_getaffinity(0))  # every core, in a one-core worker too (it is in ALL_CORES)
    if len(cores) < 2:
        pytest.skip("needs two cores")
    for name in ("conftest.py", "scheduling.py"):
        shutil.copy(TESTS / name, tmp_path / name)
    (tmp_path / "probe.py").write_text(AFFINITY_PROBE)
    (tmp_path / "test_a.py").write_text("from probe import _probe\ndef test_a():\n    _probe('a')\n")
    # one file, so one worker runs the ALL_CORES test and then another test
    (tmp_path / "test_distributed.py").write_text(
        "from probe import _probe\ndef test_workers_on_one_machine():\n    _probe('wide')\n"
        "def test_z():\n    _probe('after')\n")
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # this run's own worker's
    env.update(TBDKIT_TEST_ONE_CORE_PER_WORKER="1", PROBE_OUT=str(out), PYTHONPATH=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadfile", str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    for name in ("a", "after"):
        core = [cores[int(seen[name]["worker"][2:]) % len(cores)]]
        assert seen[name]["own"] == core and json.loads(seen[name]["child"]) == core, seen
    assert seen["wide"]["own"] == cores and json.loads(seen["wide"]["child"]) == cores, seen
    assert seen["wide"]["worker"] == seen["after"]["worker"], seen


def test_make_test_checks_each_compile_bf16_and_math_mode_outcome_of_each_stack_once():
    """Every outcome the catalog's [checks.parity] and [checks.math_modes] tables give a stack's compiled, bf16 and
    math-mode legs (compiled, trained as standard for each reason, bf16 near fp32, refused for each reason, every
    math mode steps, checked in the model's own test) has exactly one cell in `make test`, a cell that shows it; the
    other cells' legs are `make test-compiled`'s."""
    for stack, cells in OUTCOME_CELLS.items():
        every = EVERY_LEG_IN_MAKE_TEST.get(stack, set())
        for leg in LEGS:
            assert all(in_make_test(m, stack, leg) for m in every)  # today's workloads: every leg, on purpose
            kept = [m for m in models_on(stack) if in_make_test(m, stack, leg) and m not in every]
            outcomes = {outcome(m, stack, leg) for m in models_on(stack) if m not in every}
            assert {outcome(m, stack, leg) for m in kept} == outcomes, (stack, leg, kept, outcomes)
            assert len(kept) == len(outcomes), (stack, leg, kept)
        shown = {outcome(m, stack, leg) for m in models_on(stack) for leg in LEGS}
        assert set(cells) == shown, (stack, set(cells) ^ shown)  # no outcome left unnamed, none named that no cell shows


def test_make_test_compiled_selects_every_leg_that_make_test_leaves_out():
    """`make test-compiled`'s -k expression (its terms joined by `or`, each matched in a test's name as pytest does)
    selects each generated test that has a cell marked compiled_matrix, and no other generated test."""
    import re

    from model_checks import generated_tests

    (expression,) = re.findall(r'-k "([^"]+)"', (TESTS.parent / "Makefile").read_text().split("\ntest-compiled:")[1])
    terms = expression.split(" or ")
    for stack in OUTCOME_CELLS:
        tests = {n: f for n, f in generated_tests(stack).items() if n.startswith("test_")}
        legs = {n for n, f in tests.items() for mark in getattr(f, "pytestmark", []) if mark.name == "parametrize"
                for p in mark.args[1] if any(m.name == "compiled_matrix" for m in p.marks)}
        assert legs == {n for n in tests if any(t in n for t in terms)}, (stack, legs, terms)
