"""How `make test` schedules the tests: which run alone, and which units of tests start first on the workers.

SERIAL: the tests run alone, after the others have run on two workers. Each measures time or CPU share,
holds something machine-wide, or expects its runs undisturbed (beside a neighbour test a bench run is
rightly marked `disturbed`, and a window under load may end without a confidence interval). A key is a
test file (every test in it) or `file::test_function` (that function, every parameter of it), with the
reason. tests/conftest.py marks them `serial`; run as a script, this prints the files of a folder that
hold serial tests, so `make test`'s second pass collects only those (and skips when there are none).

unit_of: what a worker takes at a time. On the host, a test file, or files that share a costly fixture
(SHARED_UNIT). In a stack's suite, a catalog model's
tests: the checks every model shares (test_every_model_<stack>.py, one parameter per model) together
with its own file (test_<model>_<stack>.py), which reads the same kept training runs (model_checks'
learned() and stepped(), kept once per process); any other file of a stack is a unit of its own.

LONGEST_FIRST: the units that take longest on a worker, longest first. Started last, a long unit would
run on one worker while the other has nothing left to do. tests/conftest.py moves them to the front of
the collection, and `make test` keeps that order (`--no-loadscope-reorder`; xdist would otherwise start
the units with the most tests first).

Nothing is imported here: the Makefile runs it with any Python.
"""

from __future__ import annotations

import sys
from pathlib import Path

SERIAL: dict[str, str] = {
    "test_calibrate.py": "busy threads, an idle process and an A/A overhead, timed",
    "test_calibrate_flops.py": "times kernels against their known FLOPs",
    "test_calibrate_gpu.py": "the GPU probes' busy and idle windows",
    "test_collectors.py": "the CPU collector against this process's own clock",
    "test_compare.py::test_three_and_three_real_runs_of_one_spec_are_the_same_within_noise": "three and three "
    "runs of one spec (a module fixture) must agree within their noise",
    "test_compare.py::test_batch_2_against_batch_8_gives_a_verdict_with_its_interval": "shares those runs",
    "test_disturbed.py": "runs must see no foreign CPU load",
    "test_energy.py": "RAPL energy over idle and busy windows",
    "test_distributed.py::test_two_namespaces_and_a_1gbit_link": "network namespaces (none may be left), and "
    "the shaped link's throughput against the unshaped one's",
    "test_distributed_tf_mxnet.py::test_two_workers_on_one_machine": "every worker's run is expected ok",
    "test_distributed_tf_mxnet.py::test_group_job_on_two_namespaces": "network namespaces (none may be left); "
    "every worker's run is expected ok",
    "test_bench_cli.py::test_bench_writes_a_complete_run": "a complete run has a throughput CI",
    "test_bench_cli.py::test_bench_writes_a_trace_and_an_mllog": "shares that run (a module fixture)",
    "test_bench_cli.py::test_runs_and_show": "shares that run",
    "test_bench_cli.py::test_bench_json_stdout_is_only_json": "shares that run",
    # the stacks' suites
    "test_memory_mxnet.py": "exact bytes from MXNet's storage profiler: beside another worker a freed "
    "output was at times still counted when the probe read (3 of 9 runs, at the record scope's end then)",
    "test_memory_tensorflow.py": "exact bytes from TensorFlow's allocator statistics",
}

# Tests of the host suite's parallel pass that need every core: there each worker runs on one core
# (tests/conftest.py, TBDKIT_TEST_ONE_CORE_PER_WORKER), and these get the whole machine back while they run.
ALL_CORES: dict[str, str] = {
    "test_distributed.py::test_workers_on_one_machine": "four workers on one machine: the kit allows two per core",
    "test_scheduling.py::test_each_parallel_worker_runs_on_one_core_and_all_cores_tests_get_them_back": "its own "
    "workers take the cores in turn",
}

# Seconds on one worker in a `make test` run on CI's 2-core machine (a worker's time for the whole unit): the host
# suite's files' durations summed, a stack's units' (where and when each was measured: docs/measured-here.md,
# "Stacks' suites and the Makefile").
LONGEST_FIRST: dict[str, float] = {
    # the host suite
    "test_docker_real_tensorflow.py": 210,
    "test_docker_real.py": 130,
    "test_docker_real_mxnet.py": 80,
    "test_sweep_cli.py": 240,
    # a real Slurm cluster's jobs: its tests' durations summed on a shared, loaded 2-core machine, so an upper
    # bound (docs/measured-here.md, "The kit's machinery tests")
    "test_slurm.py": 980,
    "test_adopt.py": 290,  # adopting three interpreters, then MiniGo benched on all three
    "test_every_cell_benches.py": 270,
    "test_fsdp.py": 194,  # two Llama jobs of 2 gloo workers (FSDP2, DDP; the DDP job also test_distributed's checks)
    "test_as_typed.py": 159,
    # every model's frameworks compared, and Llama's and ViT's six describes, from one describe server per stack
    "test_cross_framework.py": 520,
    "test_distributed.py": 110,
    "test_adopt_fakes.py": 100,
    "test_bench_cli.py": 104,
    "test_own_model.py": 120,
    "test_distributed_tf_mxnet.py": 78,
    # PyTorch's suite
    "pytorch/mask_rcnn": 137,
    "pytorch/compiled_bench": 55,
    "pytorch/efficientdet": 67,
    "pytorch/seq2seq": 65,
    "pytorch/faster_rcnn": 64,
    "pytorch/transformer": 40,
    "pytorch/resnet50": 38,
    "pytorch/inception_v3": 37,
    # TensorFlow's suite
    "tensorflow/efficientdet": 386,
    "tensorflow/inception_v3": 260,
    "tensorflow/wgan_gp": 172,
    "tensorflow/resnet50": 81,
    "tensorflow/transformer": 74,
    "tensorflow/deepspeech2": 67,
    "tensorflow/bert": 46,
    "tensorflow/mask_rcnn": 44,
    "tensorflow/one_process": 34,
    # MXNet's
    "mxnet/mask_rcnn": 16,
    "mxnet/context_placement": 11,
}


def _listed(table: dict[str, str], file_name: str, function: str) -> bool:
    """Whether `table` names the test `function` (its name without parameters) of `file_name`, or the whole file."""
    return file_name in table or f"{file_name}::{function}" in table


def is_serial(file_name: str, function: str) -> bool:
    """Whether the test `function` of the file `file_name` runs alone."""
    return _listed(SERIAL, file_name, function)


def needs_all_cores(file_name: str, function: str) -> bool:
    """Whether the test `function` of the file `file_name` gets every core back in a one-core worker."""
    return _listed(ALL_CORES, file_name, function)


def serial_files(folder: Path) -> list[Path]:
    """The files directly in `folder` that hold a serial test."""
    names = {key.split("::")[0] for key in SERIAL}
    return sorted(p for p in folder.glob("test_*.py") if p.name in names)


STACKS = ("pytorch", "tensorflow", "mxnet")

# Host files that a worker takes together with another, as one unit: they share a session fixture whose processes
# cost most of their time (tests/conftest.py's describe servers import every stack once per worker).
SHARED_UNIT: dict[str, str] = {"test_modern_frameworks.py": "test_cross_framework.py"}


def unit_of(nodeid: str) -> str:
    """The unit a worker takes `nodeid` in: its file's name, or `<stack>/<model>` (see above)."""
    path, _, test = nodeid.partition("::")
    folder, _, file = path.rpartition("/")
    stack = folder.rpartition("/")[2]
    if stack in STACKS:
        if file == f"test_every_model_{stack}.py" and test.endswith("]"):
            return f"{stack}/{test[test.rindex('[') + 1:-1]}"
        if file.startswith("test_") and file.endswith(f"_{stack}.py"):
            return f"{stack}/{file[len('test_'):-len(f'_{stack}.py')]}"
    return SHARED_UNIT.get(file, file)


def longest_first(nodeids: list[str]) -> list[str]:
    """`nodeids` with LONGEST_FIRST's units in front, longest first; the others keep their order."""
    rank = {unit: i for i, unit in enumerate(sorted(LONGEST_FIRST, key=lambda u: -LONGEST_FIRST[u]))}
    return sorted(nodeids, key=lambda n: rank.get(unit_of(n), len(rank)))


if __name__ == "__main__":
    print(" ".join(str(p) for p in serial_files(Path(sys.argv[1]))))
