"""Fixtures shared by the tests (NumPy only at import: this runs in every environment)."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from scheduling import is_serial, longest_first, needs_all_cores, unit_of


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """tests/scheduling.py's tests are marked `serial` (`make test` runs them alone, after the others), and
    its longest units are moved to the front (a unit's tests keep their order)."""
    for item in items:
        function = getattr(item, "originalname", item.name)
        if is_serial(item.path.name, function):
            item.add_marker(pytest.mark.serial)
    order = {nodeid: i for i, nodeid in enumerate(longest_first([item.nodeid for item in items]))}
    items.sort(key=lambda item: order[item.nodeid])


ONE_CORE = "TBDKIT_TEST_ONE_CORE_PER_WORKER"
MACHINE_CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []  # Linux's call


def _run_on(cores: set[int]) -> None:
    """This process and every process it starts from now on run on `cores` (each thread keeps its own mask)."""
    for task in Path("/proc/self/task").iterdir():
        os.sched_setaffinity(int(task.name), cores)


def _worker_core() -> set[int] | None:
    """This pytest-xdist worker's one core where `make test` asks for it (ONE_CORE=1), else None."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if os.environ.get(ONE_CORE) != "1" or not worker.startswith("gw") or not MACHINE_CORES:
        return None
    return {MACHINE_CORES[int(worker[2:]) % len(MACHINE_CORES)]}


def _build_each_cli_once() -> None:
    """Typer's CliRunner builds the click command from the app's functions (their signatures and type hints) on
    every invoke; an app's command is built once per process here instead (the command holds no state between
    invocations: each `main` call makes its own context; docs/measured-here.md has the cost)."""
    try:
        import typer.testing
    except ImportError:  # a stack's environment without the kit's CLI dependencies
        return
    build = typer.testing._get_command
    assert callable(build), "typer.testing no longer has _get_command: remove _build_each_cli_once"
    built: dict[object, object] = {}  # app -> its command (an app is hashed by its identity)

    def build_once(app: object) -> object:
        if app not in built:
            built[app] = build(app)
        return built[app]

    typer.testing._get_command = build_once  # type: ignore[assignment]


_build_each_cli_once()

@pytest.hookimpl(wrapper=True)
def pytest_collection() -> object:
    """pytest keeps each test module's assertion-rewritten bytecode beside it unless bytecode writing is off
    (PYTHONDONTWRITEBYTECODE, as on CI's machines), and then every worker of every pass rewrites every test
    module again (docs/measured-here.md has the cost). While collecting, this process writes it
    (pytest's own files, under tests/), so the first collection writes and the others read; the tests then run
    as the environment says, and the processes they start inherit it unchanged."""
    was = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = was


def pytest_configure(config: pytest.Config) -> None:
    """Where `make test` asks for it (ONE_CORE=1, the host suite's parallel pass), each pytest-xdist worker
    and every process it starts runs on one core, the workers taking the cores in turn: a run the kit
    starts then sizes its thread pools to that core (tbdkit.env.cpus, as under `taskset`), where on two
    cores shared by several workers each run's two-thread pools burnt CPU waiting on each other (a Deep
    Speech 2 bench alone: 23 s of CPU with two threads, 13 s with one, at the same throughput).
    tests/scheduling.py's ALL_CORES tests get the machine back while they run."""
    core = _worker_core()
    if core is not None:
        _run_on(core)


@pytest.fixture(autouse=True)
def _all_cores_where_needed(request: pytest.FixtureRequest):
    """An ALL_CORES test (tests/scheduling.py) in a one-core worker runs on every core, then the worker on its own."""
    core = _worker_core()
    function = getattr(request.node, "originalname", request.node.name)
    if core is None or not needs_all_cores(request.node.path.name, function):
        yield
        return
    _run_on(set(MACHINE_CORES))
    try:
        yield
    finally:
        _run_on(core)


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


@pytest.fixture(autouse=True)
def _user_model_folders_stay_with_their_test():
    """`--workloads` and `reproduce` add model folders to the process's environment (TBDKIT_WORKLOAD_PATH,
    TBDKIT_BUNDLED_WORKLOADS) for the agents they start; a command run in-process (CliRunner) must not leave
    them to the next test of the worker."""
    names = ("TBDKIT_WORKLOAD_PATH", "TBDKIT_BUNDLED_WORKLOADS")
    saved = {name: os.environ.get(name) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def describe_servers():
    """One describe server (tbdkit.describe.server) per stack for every cross-framework describe of a worker: the
    cross-framework checks' and the modern models' (`make test` gives both files to one worker, tests/scheduling.py's
    unit_of), each describe a fork of a process that imported its framework once, every stack started at once."""
    from tbdkit.bench.cross_framework import DescribeServers
    from tbdkit.spec import catalog

    with DescribeServers() as servers:
        shared = [model for model in catalog.models().values() if len(model.frameworks) > 1]
        servers.start(sorted({f for model in shared for f in model.frameworks}))
        yield servers
