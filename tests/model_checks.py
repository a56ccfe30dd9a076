"""The tests' one helper module: running the CLI, loading a workload's files, an adapter on the CPU,
the checks every model passes (which tests/<stack>/test_every_model_<stack>.py runs over `catalog.models()`, with
each model's [checks] table and the kit's check functions, tbdkit.agent.workload_checks, which `tbdkit
check-workload` runs too), and NumPy references that several stacks' model-specific tests share.

It imports no framework at module level: host tests import it in the kit's venv, each stack's tests in
theirs. Adding a model: its workload folder with its [checks] table (the generated tests fail and say so until
it has one), and, where something is specific to it, tests/<stack>/test_<model>_<stack>.py."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import math
import os
import re
import signal
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tbdkit.agent import workload_checks
from tbdkit.agent.workload_checks import CPU_MATH_MODES, TORCH_COMPILE_BACKEND_ON_A_CPU, close_losses, loss_falls
from tbdkit.spec import catalog, check_settings, contract
from tbdkit.spec.check_settings import Elsewhere, Learning, MathModes, Parity

WORKLOADS = Path(__file__).parents[1] / "workloads"
TESTS = Path(__file__).parent

# ---------------------------------------------------------------------------------------------------
# Running the CLI as a user does


def tbdkit_command(*args: str) -> list[str]:
    """`tbdkit ARGS` as this Python runs it (for a test that starts it with Popen)."""
    return [sys.executable, "-m", "tbdkit.cli", *args]


def tbdkit(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`tbdkit ARGS` run by this Python, its output captured as text; `env` adds to (or overrides)
    os.environ. The caller checks the return code."""
    return subprocess.run(tbdkit_command(*args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`tbdkit ARGS` in this process through Typer's CliRunner, for a test whose point is not a process: its exit
    code, stdout and stderr as tbdkit() gives them, run from `cwd` (then back), `env` added to os.environ while it
    runs. An exception the CLI let through (a traceback a user would see) is raised here, so the test fails."""
    from typer.testing import CliRunner

    from tbdkit.cli import app

    before = Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        result = CliRunner().invoke(app, list(args), env=env)
    finally:
        os.chdir(before)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["tbdkit", *args], result.exit_code, result.stdout, result.stderr)


@contextlib.contextmanager
def ctrl_c_at(phase: str) -> Iterator[None]:
    """While it lasts, the display (tbdkit.bench.progress) presses Ctrl-C as it shows the first run that reaches
    `phase` (e.g. "analysis": after the sample window), as a terminal does: SIGINT raises KeyboardInterrupt in
    this process, so it lands in that phase every time. Import tbdkit.cli before (it installs its own display)."""
    from tbdkit.bench import progress

    pressed: list[str] = []

    class CtrlCAt(progress.Plain):
        def run(self, label: str, unit: str) -> Callable[[dict[str, Any]], None]:
            shown = super().run(label, unit)

            def handler(event: dict[str, Any]) -> None:
                shown(event)
                if event.get("event") == "phase" and event.get("phase") == phase and not pressed:
                    pressed.append(label)
                    signal.raise_signal(signal.SIGINT)

            return handler

    before_display, before_handler = progress._display, signal.signal(signal.SIGINT, signal.default_int_handler)
    progress.use(lambda quiet, eta: contextlib.nullcontext(CtrlCAt()))
    try:
        yield
    finally:
        progress.use(before_display)
        signal.signal(signal.SIGINT, before_handler)
    assert pressed, f"no run reached its {phase} phase: Ctrl-C was never pressed"


def functions_defined(path: Path) -> set[str]:
    """The names of the functions a test file defines (for checks that a test named elsewhere exists)."""
    return {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}


def assert_run_holds_together(run: Path, row: dict[str, Any], model: str) -> None:
    """The run folder holds (run_invariants: every file, throughput = the window's work over its seconds, counts
    agreeing across files, every metric a value with its unit and method or null with the reason, the index row
    equal to the summary) and agrees with the row the bench printed: the same model, framework and status, the
    model's unit, the last loss the last step's."""
    import csv

    from run_invariants import assert_run_holds

    summary = assert_run_holds(run, indexed=True)
    assert {k: summary[k] for k in ("model", "framework", "status")} == {k: row[k] for k in ("model", "framework", "status")}
    assert summary["metrics"]["throughput"]["unit"] == catalog.get(model).throughput_unit
    stepped = [r for r in csv.DictReader((run / "iterations.csv").open()) if r["loss"] not in ("", None)]
    # iterations.csv rounds the loss to 6 decimal places (Iteration.row)
    assert round(row["loss"]["last"], 6) == pytest.approx(float(stepped[-1]["loss"]), abs=1e-9), (row["loss"], stepped[-1])


# ---------------------------------------------------------------------------------------------------
# Loading a workload's files by path (workloads are files; the kit's venv has no framework)


def load_data(model: str) -> ModuleType:
    """workloads/<model>/data.py as a fresh module (host-side data tests)."""
    catalog.workloads_on_path()  # the workloads' shared package, as the catalog's loader has it
    spec = importlib.util.spec_from_file_location(f"{model}_data_under_test", WORKLOADS / model / "data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def workload_toml(model: str) -> dict[str, Any]:
    return tomllib.loads((WORKLOADS / model / "workload.toml").read_text())


def hparams(model: str, preset: str) -> dict[str, Any]:
    """[hparams] overridden by [preset.<preset>], as the catalog merges them."""
    toml = workload_toml(model)
    return {**toml["hparams"], **toml["preset"][preset]}


def truncated_image(path: Path, width: int, height: int, fmt: str = "JPEG") -> Path:
    """A noise image at `path` cut to half its bytes: its header is intact, so only decoding every
    pixel finds the damage (noise, so that the cut half holds pixel data, not padding)."""
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path, fmt)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def modules(name: str, framework: str = "pytorch") -> tuple[catalog.Model, Any, Any]:
    """The model, its `framework` file and its data.py, as the agent loads them."""
    model = catalog.get(name)
    return model, catalog.load_module(model, framework), catalog.load_module(model, "data")


def models_on(framework: str) -> list[str]:
    """Every model of the catalog with a `framework` file: what the generated tests run over."""
    return [name for name, model in catalog.models().items() if framework in model.frameworks]


# ---------------------------------------------------------------------------------------------------
# Adapters on the CPU


def adapter(name: str, framework: str, hp: dict[str, Any] | None = None, precision: str = "fp32",
            graph: str = "standard") -> Any:
    """The `framework` adapter of workload `name` on the CPU, seed 0 (the smoke preset unless `hp` is given);
    `graph="compiled"` compiles its step (PyTorch: with TORCH_COMPILE_BACKEND_IN_TESTS), as check-workload does."""
    model = catalog.get(name)
    return workload_checks.adapter(model, framework, hp or model.hp("smoke"), precision=precision, graph=graph)


def assert_capabilities(framework: str, expected: set[str]) -> None:
    """The framework's adapter (A3C's, on the CPU) implements the core protocol and exactly the
    optional capabilities named (tbdkit.adapters.Capabilities' fields)."""
    from tbdkit import adapters

    a = adapter("a3c", framework)
    caps = adapters.capabilities(a)
    assert isinstance(a, adapters.Adapter)
    assert {f for f in caps.__dataclass_fields__ if getattr(caps, f) is a} == expected


def fp32_again(framework: str) -> None:
    """Leave the process in fp32 after an amp step (the math mode is process-wide state)."""
    workload_checks.fp32_again(framework)


# ---------------------------------------------------------------------------------------------------
# What every model passes: each model's [checks] table in its workload.toml (tbdkit.spec.check_settings) and
# the kit's own check functions (tbdkit.agent.workload_checks, which `tbdkit check-workload` runs)

# PyTorch's compiled checks compile the step with TorchDynamo and AOTAutograd (the graphs, breaks, dynamic
# shapes and recompilations of a real run) but run the graphs AOTAutograd makes eagerly: inductor's C++
# code generation costs one to several CPU minutes per model on 2 cores (docs/measurements.md, "Compiled
# graphs and bfloat16"); tests/pytorch/test_compiled_bench_pytorch.py compiles with inductor itself.
TORCH_COMPILE_BACKEND_IN_TESTS = TORCH_COMPILE_BACKEND_ON_A_CPU
# The reasons a [checks.parity] not_compiled or bf16_refused quotes
NOT_COMPILED_REASONS = {
    "no tf.function",  # tensorflow_compile.NO_FUNCTION: the detectors' eager steps
    "XLA could not compile the step",  # tensorflow_compile.XlaStep.run's fallback
    "static_shape would re-plan",  # mxnet_compile.VARIABLE: inputs padded to each batch's longest
    "no double backward",  # PyTorch's compile of WGAN-GP's gradient penalty
}
BF16_REFUSALS = {"MXNet 1.9's bfloat16 AMP could not run"}  # adapters.mxnet.BF16_FAILED


@dataclass
class ParityRun:
    """What a cell's parity check has run so far, each leg once per process and only when a test asks for it
    (TensorFlow's math-mode check asks for the bf16 leg alone): each leg's losses (bf16's, or the refusal it
    met), the compiled adapter's compile record, each leg's seconds, and the bf16 leg's adapter (in-process
    stacks)."""
    standard: list[float] | None = None
    compiled: list[float] | None = None
    bf16: list[float] | str | None = None
    record: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    bf16_adapter: Any = None


_PARITY: dict[tuple[str, str], ParityRun] = {}


# The compiled, bf16 and math-mode legs `make test` runs: each outcome of the kit's compile, bf16 and math-mode logic
# (compiled; trained as standard, with its reason; bf16 near fp32; bf16 refused, with its reason; every math mode
# steps; the math modes checked in the model's own test) once per stack, on the cheapest model that shows it
# (docs/measured-here.md has the seconds). Every other cell's legs are marked `compiled_matrix`: `make test` leaves
# them out, `make test-compiled` runs the whole matrix. TensorFlow's math-mode check is its bf16 leg's first step
# (amp on a CPU is bf16), so its cells go together.
OUTCOME_CELLS: dict[str, dict[str, str]] = {
    "pytorch": {"compiled": "deepspeech2", "not compiled: no double backward": "wgan_gp", "bf16": "minigo",
                "math modes: every mode steps": "minigo", "math modes: in its own test": "a3c"},
    "tensorflow": {"compiled": "minigo", "not compiled: no tf.function": "mask_rcnn",
                   "not compiled: XLA could not compile the step": "seq2seq", "bf16": "minigo",
                   "math modes: every mode steps": "minigo", "math modes: in its own test": "a3c"},
    "mxnet": {"compiled": "minigo", "not compiled: static_shape would re-plan": "deepspeech2", "bf16": "minigo",
              "bf16 refused: MXNet 1.9's bfloat16 AMP could not run": "deepspeech2",
              "math modes: every mode steps": "minigo", "math modes: in its own test": "a3c"},
}
LEGS = ("compiled", "bf16", "math_modes")
# Today's workloads keep every leg in `make test` on PyTorch: CI shows each of them training compiled, in bf16 and in
# each math mode.
EVERY_LEG_IN_MAKE_TEST = {"pytorch": {"llama", "vit", "dit"}}


def outcome(name: str, framework: str, leg: str) -> str:
    """The outcome a cell's `leg` ("compiled", "bf16" or "math_modes") checks, as OUTCOME_CELLS names it."""
    if leg == "math_modes":
        spec = row("math_modes", framework, name)
        return "math modes: in its own test" if isinstance(spec, Elsewhere) else "math modes: every mode steps"
    spec = row("parity", framework, name)
    if leg == "compiled":
        return "compiled" if spec.not_compiled is None else f"not compiled: {spec.not_compiled}"
    return "bf16" if spec.bf16_refused is None else f"bf16 refused: {spec.bf16_refused}"


def in_make_test(name: str, framework: str, leg: str) -> bool:
    """Whether `make test` runs the cell's `leg` (the rest is `make test-compiled`'s, marked compiled_matrix)."""
    if name in EVERY_LEG_IN_MAKE_TEST.get(framework, ()):
        return True
    return OUTCOME_CELLS[framework].get(outcome(name, framework, leg)) == name


def legs_of(framework: str, leg: str) -> Any:
    """The `name` fixture's models for a stack's `leg` test, the cells outside `make test` marked compiled_matrix."""
    return pytest.mark.parametrize("name", [
        pytest.param(m, marks=() if in_make_test(m, framework, leg) else pytest.mark.compiled_matrix)
        for m in models_on(framework)], indirect=True)


def parity_setting(name: str, framework: str) -> tuple[Parity, dict[str, Any], int, int]:
    """The cell's parity settings ([checks.parity]), its hyperparameters, batch size and steps (its learning check's, where it has one)."""
    spec = row("parity", framework, name)
    learning = row("learning", framework, name)
    hp = {**catalog.get(name).hp("smoke"), **(learning.hp if isinstance(learning, Learning) else {}), **spec.hp}
    batch = spec.batch_size or (learning.batch_size if isinstance(learning, Learning) else 1)
    steps = min(spec.steps, learning.steps) if isinstance(learning, Learning) else spec.steps
    return spec, hp, batch, steps


def parity_losses(name: str, framework: str, steps: int | None = None, **settings: Any) -> tuple[Any, list[float]]:
    """The cell's parity steps (or `steps` of them) through a new adapter in `settings` (graph, precision), on
    the learning check's fixed batch (seed 1), made afresh (A3C's batches are live actors, which a run moves on)."""
    _, hp, batch_size, all_steps = parity_setting(name, framework)
    steps = steps or all_steps
    a = adapter(name, framework, hp=hp, **settings)
    batch = next(modules(name, framework)[2].batches("synthetic", hp, batch_size, seed=1))
    inputs = a.prepare(batch)  # A3C's: a handle to its actors, whose rollout each step plays on
    return a, [a.loss_value(a.step(inputs)) for _ in range(steps)]


def bf16_losses(name: str, framework: str) -> list[float] | str:
    """The bf16 losses, or the adapter's refusal (its RuntimeError's sentence)."""
    return bf16_leg(name, framework)[1]


def bf16_leg(name: str, framework: str) -> tuple[Any, list[float] | str]:
    """The bf16 adapter and its losses, or no adapter and its refusal (its RuntimeError's sentence)."""
    try:
        return parity_losses(name, framework, precision="bf16")
    except RuntimeError as exc:
        return None, str(exc)


def mxnet_bf16_losses(name: str) -> list[float] | str:
    """MXNet's bf16 steps (or its refusal) in a process of their own: its AMP rewrites MXNet's operators for
    good (amp.init), which would put every later test of this process in bfloat16."""
    import json

    script = "import json, sys\nfrom model_checks import bf16_losses\nprint(json.dumps(bf16_losses(sys.argv[1], 'mxnet')))\n"
    proc = subprocess.run([sys.executable, "-c", script, name], capture_output=True, text=True, timeout=600, cwd=TESTS,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent),
                                                                          os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def parity(name: str, framework: str, *legs: str) -> ParityRun:
    """The model's parity check ([checks.parity]): the `legs` asked for ("standard", "compiled", "bf16"; none
    named: all three), each run once per process: the learning check's losses (or a standard run of its own),
    compiled, bf16. Leaves the process in fp32."""
    import time

    run = _PARITY.setdefault((name, framework), ParityRun())
    spec, _, _, steps = parity_setting(name, framework)
    for leg in legs or ("standard", "compiled", "bf16"):
        if leg in run.seconds:
            continue
        t0 = time.perf_counter()
        if leg == "standard":
            learning = row("learning", framework, name)
            if isinstance(learning, Learning) and all(learning.hp.get(k) == v for k, v in spec.hp.items()):
                run.standard = learned(name, framework).losses[:steps]  # the same settings: the learning check's
            else:
                run.standard = parity_losses(name, framework)[1]
        elif leg == "compiled":
            # a cell that trains as standard takes one compiled step: its record, and the same first loss
            compiled_adapter, run.compiled = parity_losses(name, framework, 1 if spec.not_compiled else steps,
                                                           graph="compiled")
            run.record = compiled_adapter.compile_record()
        else:
            try:
                if framework == "mxnet":
                    run.bf16 = mxnet_bf16_losses(name)
                else:
                    run.bf16_adapter, run.bf16 = bf16_leg(name, framework)
            finally:
                fp32_again(framework)
        run.seconds[leg] = time.perf_counter() - t0
    return run


def assert_close_losses(got: list[float], expected: list[float], tolerance: float | None, what: str) -> None:
    """Every loss finite and (a tolerance given) within it of its counterpart, relative to the first expected loss."""
    failure = close_losses(got, expected, tolerance, what)
    assert failure is None, failure


def row(check: str, framework: str, name: str) -> Any:
    """The model's settings of one check (its workload.toml's [checks], tbdkit.spec.check_settings), or a failure
    that says what to add. A model without [checks.parity] takes its defaults, as `tbdkit check-workload` does."""
    value = getattr(check_settings.of(catalog.get(name), framework), check)
    if value is None and check == "parity":
        return Parity()
    table = "] smoke_parameters" if check == "smoke_parameters" else f".{check}]"
    assert value is not None, (f"{name} has a {framework} workload but workloads/{name}/workload.toml has no "
                               f"[checks{table}: add it (or an `elsewhere` naming its own test)")
    return value


def assert_elsewhere(name: str, framework: str, where: Elsewhere) -> None:
    """The model's own test file holds the test named (the generated check defers to it)."""
    path = TESTS / framework / f"test_{name}_{framework}.py"
    assert path.is_file() and re.search(rf"^def {where.test}\(", path.read_text(), re.M), \
        f"{path.relative_to(TESTS.parent)} must define {where.test}"


def assert_workload_file_is_clean(name: str, framework: str = "pytorch") -> None:
    """A workload file holds only the model, optimizer and train step: no timing, logging or profiling,
    and no copy of the loss-scaling step its stack's workloads share (tbdkit.spec.contract.code_gaps)."""
    gaps = contract.code_gaps(catalog.get(name), framework)
    assert not gaps, gaps


def assert_learns(a: Any, data: Any, hp: dict[str, Any], batch_size: int, steps: int, factor: float) -> list[float]:
    """`steps` steps through the adapter on one synthetic batch (seed 1): finite losses, the last below
    factor x the first."""
    inputs = a.prepare(next(data.batches("synthetic", hp, batch_size, seed=1)))
    losses = [a.loss_value(a.step(inputs)) for _ in range(steps)]
    assert_loss_falls(losses, factor)
    return losses


def assert_loss_falls(losses: list[float], factor: float = 0.99) -> None:
    failure = loss_falls(losses, factor)
    assert failure is None, failure


@dataclass
class Learned:
    """What a learning check leaves: the trained state (a PyTorch workload's training, another
    stack's adapter), the losses, the hyperparameters, the initial weights by name (initial_weights' names,
    read before the first step) and the adapter that trained (the analyses check's, analyses())."""
    trained: Any
    losses: list[float]
    hp: dict[str, Any]
    initial: dict[str, np.ndarray] = field(default_factory=dict)
    adapter: Any = None

    @property
    def same_draws(self) -> list[list[str]]:
        """The groups of initial weights one draw gave."""
        return same_draws(list(self.initial.items()))


_LEARNED: dict[tuple[str, str, str | None], Learned] = {}


def learned(name: str, framework: str, variant: str | None = None) -> Learned:
    """The model's learning check ([checks.learning]), run once per process: the generated test asserts
    it, a model's own test may check more of the same run (the optimizer's step counts, ...)."""
    key = (name, framework, variant)
    if key not in _LEARNED:
        spec = row("learning", framework, name)
        assert isinstance(spec, Learning), spec
        model, _, data = modules(name, framework)
        hp = {**model.hp("smoke", variant), **spec.hp}  # the batch's too (WGAN-GP's holds a slice per critic step)
        a = adapter(name, framework, hp=hp)
        initial = initial_weights(a.training.model, framework)
        losses = assert_learns(a, data, hp, spec.batch_size, spec.steps, spec.factor)
        _LEARNED[key] = Learned(a.training if framework == "pytorch" else a, losses, hp, dict(initial), a)
    return _LEARNED[key]


def analyses(name: str, framework: str) -> tuple[str | None, str]:
    """The model's analyses check (tbdkit.agent.workload_checks.analysed: the memory breakdown and, on PyTorch, the
    model FLOP count a bench run takes after its window) on the learning check's batch (analysis_setting), through
    the adapter learned() kept, as `tbdkit check-workload` does; a new adapter where the learning check is the model's
    own test or its own file counts the kept run's steps (STEPS_COUNTED). What failed (None: nothing), what was
    measured."""
    model = catalog.get(name)
    hp, batch_size = workload_checks.analysis_setting(model, check_settings.of(model, framework))
    reusable = isinstance(row("learning", framework, name), Learning) and (framework, name) not in STEPS_COUNTED
    a = learned(name, framework).adapter if reusable else adapter(name, framework, hp=hp)
    batch = next(modules(name, framework)[2].batches("synthetic", hp, batch_size, seed=1))
    return workload_checks.analysed(a, batch)


def kept_learning_run(name: str, framework: str) -> Any:
    """A module fixture for a model's own file (the model in REUSED): the learning check's run (learned(), the one
    the generated tests assert), released for the file once its tests are done."""

    @pytest.fixture(scope="module")
    def run() -> Any:
        yield learned(name, framework)
        release(name, framework, by="own")

    return run


def initial_weights(model: Any, framework: str) -> list[tuple[str, np.ndarray]]:
    """The network's weights, each once (a tied one under its first name), as NumPy arrays of their own (a copy:
    PyTorch's numpy() of a CPU float32 tensor shares its memory, and a kept copy must not follow the training)."""
    if framework == "pytorch":
        return [(n, p.detach().float().cpu().numpy().copy()) for n, p in model.named_parameters()]
    if framework == "tensorflow":
        return list({id(w): (w.path, np.array(w, copy=True)) for w in model.weights}.values())
    return [(n, p.data().asnumpy()) for n, p in model.collect_params().items()]


def same_draws(weights: list[tuple[str, np.ndarray]]) -> list[list[str]]:
    """Groups of random weights (at least 4 values, not all equal) whose first values coincide: one draw given
    to several weights (a Keras 3 initializer repeats its draw in every weight it initialises, and the same
    draw of a smaller shape is the start of a larger one's)."""
    groups: dict[bytes, list[str]] = {}
    for n, v in weights:
        flat = np.asarray(v, np.float64).ravel()
        if flat.size >= 4 and np.any(flat != flat[0]):
            groups.setdefault(flat[:4].tobytes(), []).append(n)
    return [g for g in groups.values() if len(g) > 1]


def import_time_initializers(name: str) -> list[str]:
    """Keras initializers a TensorFlow workload's module (or a _shared module it loaded) made at import time:
    an initializer draws its seed when made, so one made before the run seeds Python's generator draws
    another seed in every process."""
    import keras

    modules(name, "tensorflow")
    found = []
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("_shared.") or module_name == f"tbdkit_workloads.{name}.tensorflow":
            found += [f"{module_name}.{k}" for k, v in vars(module).items()
                      if isinstance(v, keras.initializers.Initializer)]
    return found


_STEPPED: dict[tuple[str, str], dict[str, tuple[Any, float]]] = {}


def stepped(name: str, framework: str) -> dict[str, tuple[Any, float]]:
    """The model's math-mode check ([checks.math_modes]), run once per process: each mode's adapter and the
    loss of its one step. Leaves the process in fp32."""
    key = (name, framework)
    if key not in _STEPPED:
        spec = row("math_modes", framework, name)
        if framework == "tensorflow":  # amp on a CPU is bf16: the bf16 parity leg's first step
            assert_amp_is_bf16_here(framework)
            run = parity(name, framework, "bf16")
            assert run.bf16_adapter is not None and isinstance(run.bf16, list), run.bf16
            _STEPPED[key] = {"amp": (run.bf16_adapter, run.bf16[0])}
            return _STEPPED[key]
        assert isinstance(spec, MathModes), spec
        model, _, data = modules(name, framework)
        hp = {**model.hp("smoke"), **spec.hp}
        batch = next(data.batches("synthetic", hp, spec.batch_size, seed=spec.seed))
        out = {}
        try:
            for mode in CPU_MATH_MODES[framework]:
                a = adapter(name, framework, hp=hp, precision=mode)
                out[mode] = (a, a.loss_value(a.step(a.prepare(batch))))
        finally:
            fp32_again(framework)
        _STEPPED[key] = out
    return _STEPPED[key]


def amp_step(name: str) -> tuple[Any, float]:
    """TensorFlow: the amp step of `tbdkit check-workload`'s math-mode check (its [checks.math_modes] batch, seed and
    hp; one step, its loss finite, and above 0 where it says `positive`), for a model's own test that reads the
    adapter it ran in, where the cell's bf16 parity leg (stepped()'s amp, the learning batch's steps: in bfloat16 on
    a CPU, seconds each) is not in `make test`. On this CPU amp is built exactly as bf16
    (assert_amp_is_bf16_here). Leaves the process in fp32."""
    assert_amp_is_bf16_here("tensorflow")
    spec = row("math_modes", "tensorflow", name)
    assert isinstance(spec, MathModes), spec
    model, _, data = modules(name, "tensorflow")
    hp = {**model.hp("smoke"), **spec.hp}
    try:
        a = adapter(name, "tensorflow", hp=hp, precision="amp")
        loss = a.loss_value(a.step(a.prepare(next(data.batches("synthetic", hp, spec.batch_size, seed=spec.seed)))))
    finally:
        fp32_again("tensorflow")
    assert math.isfinite(loss) and (not spec.positive or loss > 0), loss
    return a, loss


def assert_traced_once(training: Any) -> None:
    """TensorFlow: over the learning check's steps (one fixed batch), each tf.function of the training state
    was traced at most once, its step exactly once: the optimizer was built before the first call
    (_shared/tf_amp.built), not in a first trace that TensorFlow then repeats without it. (The detectors'
    eager steps have no tf.function.)"""
    import keras

    from tbdkit.adapters.tensorflow_compile import is_function

    counts = {k: v.experimental_get_tracing_count() for k, v in vars(training).items() if is_function(v)}
    assert all(n <= 1 for n in counts.values()) and (not counts or 1 in counts.values()), counts
    assert all(o.built for o in vars(training).values() if isinstance(o, keras.optimizers.Optimizer))


def assert_amp_is_bf16_here(framework: str) -> None:
    """On this CPU the stack's adapter builds amp exactly as bf16 (policy, TF32, loss scaling), the mode aside."""
    assert framework == "tensorflow", framework
    from tbdkit.adapters.tensorflow import Precision as TFPrecision

    try:
        amp, bf16 = TFPrecision("amp", on_gpu=False).describe(), TFPrecision("bf16", on_gpu=False).describe()
    finally:
        fp32_again(framework)
    assert {**amp, "mode": "bf16"} == bf16, (amp, bf16)


def fp32_adapter(name: str, framework: str) -> Any:
    """An fp32 smoke adapter of the model: one the checks above already built, else a new one."""
    kept = _LEARNED.get((name, framework, None))
    if kept is not None and framework != "pytorch":
        return kept.trained
    if "fp32" in _STEPPED.get((name, framework), {}):
        return _STEPPED[(name, framework)]["fp32"][0]
    return adapter(name, framework)


# The models whose own files read more from the runs above (learned(), stepped()): the generated tests
# keep those runs for them and free the others' (a model's own test re-runs one it finds freed).
REUSED = {("pytorch", "wgan_gp"), ("tensorflow", "deepspeech2"), ("tensorflow", "efficientdet"),
          ("tensorflow", "faster_rcnn"), ("tensorflow", "inception_v3"), ("tensorflow", "mask_rcnn"),
          ("tensorflow", "minigo"), ("tensorflow", "resnet50"), ("tensorflow", "transformer"),
          ("tensorflow", "wgan_gp"), ("mxnet", "bert"), ("mxnet", "minigo"), ("mxnet", "transformer")}


# Those of them whose own files count the kept learning run's steps (its optimizers' iterations or step counters): the
# analyses check, which steps twice more, takes a new adapter for them (the others' own files read shapes, counts of
# parameters, hyperparameters, losses or initial weights, which those steps leave as they are).
STEPS_COUNTED = {("pytorch", "wgan_gp"), ("tensorflow", "resnet50"), ("tensorflow", "wgan_gp"), ("mxnet", "bert"),
                 ("mxnet", "minigo")}

_RELEASED_BY: dict[tuple[str, str], set[str]] = {}


def release(name: str, framework: str, by: str = "generated") -> None:
    """Free a model's kept runs once the generated tests (by="generated") are done with them and, where its own
    file reads them too (REUSED), that file has said so as well (by="own", from a module fixture's teardown: in a
    unit either file may come first); a REUSED model's own file that never says so keeps them for the process."""
    done = _RELEASED_BY.setdefault((name, framework), set())
    done.add(by)
    if (framework, name) not in REUSED or {"generated", "own"} <= done:
        for key in [k for k in _LEARNED if k[:2] == (name, framework)]:
            del _LEARNED[key]
        _STEPPED.pop((name, framework), None)
    if by == "generated":
        _PARITY.pop((name, framework), None)


def parameters(module: Any, skip_prefix: str | None = None) -> int:
    """A torch module's parameters, less those whose names start with `skip_prefix`."""
    return sum(p.numel() for n, p in module.named_parameters() if not (skip_prefix and n.startswith(skip_prefix)))


def converge_briefly(name: str, hp: dict[str, Any], batch_size: int, run_dir: Any) -> dict[str, Any]:
    """PyTorch: a few seconds of the converge preset's loop (hp sets eval_every_s, max_train_s and an
    unreachable target). The curve file agrees with the summary the loop returns: its first point is the
    untrained network's (step 0, no loss yet), its steps and samples grow by whole batches, it ends once
    max_train_s of training passed; first, best and final quality and the evaluations are the curve's; the target
    is not reached and its time is null with the reason; the throughput is in the model's unit."""
    import csv

    from tbdkit.adapters import load
    from tbdkit.agent import converge

    model, workload, data = modules(name)
    a = load("pytorch", workload=workload, hp=hp, device="cpu", precision="fp32", seed=0)
    out = converge.train(a, data, hp, "synthetic", batch_size, 0, run_dir, lambda: False, model.throughput_unit)
    text = (run_dir / "convergence.csv").read_text()
    assert text.splitlines()[0] == "wall_s,train_s,step,samples,loss,quality", text[:200]
    rows = list(csv.DictReader(text.splitlines()))
    assert len(rows) >= 3 and rows[0]["step"] == rows[0]["samples"] == "0" and rows[0]["loss"] == "", rows[:2]
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(set(steps)) and all(int(r["samples"]) == int(r["step"]) * batch_size for r in rows), rows
    assert all(math.isfinite(float(r["loss"])) for r in rows[1:]) and float(rows[-1]["train_s"]) >= hp["max_train_s"]
    qualities = [float(r["quality"]) for r in rows]
    c, metrics = out["convergence"], out["metrics"]
    assert (c["first_quality"], c["best_quality"], c["final_quality"], c["evaluations"]) == (
        qualities[0], max(qualities), qualities[-1], len(rows)), (c, qualities)
    assert not c["reached"] and metrics["time_to_target"]["value"] is None
    assert "not reached within max_train_s" in metrics["time_to_target"]["reason"], metrics["time_to_target"]
    throughput = metrics["training_throughput"]
    assert throughput["value"] > 0 and throughput["unit"] == model.throughput_unit, throughput
    return out


def generated_tests(framework: str) -> dict[str, Any]:
    """The tests every model of the catalog with a `framework` file passes, for that stack's
    tests/<stack>/test_every_model_<stack>.py to take into its namespace (pytest collects them there):
    it learns on a fixed batch, steps in each math mode, takes the analyses after a bench run's window (on the
    learning check's network), has the smoke preset's parameter count, and its file holds only model code. A new workload folder is picked up by itself (and fails until its
    [checks] table is in its workload.toml)."""

    @pytest.fixture(scope="module", params=models_on(framework))
    def name(request: Any) -> Any:
        """One model at a time (a module-scoped parameter groups its tests), its kept runs freed after."""
        yield request.param
        release(request.param, framework)

    def test_learns_on_a_fixed_batch(name: str) -> None:
        spec = row("learning", framework, name)
        if isinstance(spec, Elsewhere):
            assert_elsewhere(name, framework, spec)
            return
        for variant in spec.variants:
            run = learned(name, framework, variant)
            assert len(run.losses) == spec.steps
            if framework == "tensorflow":
                assert_traced_once(run.trained.training)

    @legs_of(framework, "math_modes")
    def test_every_math_mode_steps(name: str) -> None:
        spec = row("math_modes", framework, name)
        if isinstance(spec, Elsewhere):
            assert_elsewhere(name, framework, spec)
            return
        losses = {mode: loss for mode, (_, loss) in stepped(name, framework).items()}
        assert set(losses) == set(CPU_MATH_MODES[framework]) and all(math.isfinite(x) for x in losses.values()), losses
        assert not spec.positive or all(x > 0 for x in losses.values()), losses

    def test_smoke_parameter_count(name: str) -> None:
        expected = row("smoke_parameters", framework, name)
        counted = fp32_adapter(name, framework).model_info()["parameters"]
        assert counted == expected, (counted, expected)

    def test_workload_file_holds_only_model_code(name: str) -> None:
        assert_workload_file_is_clean(name, framework)

    def test_meets_the_contract(name: str) -> None:
        """data.py and the framework file, loaded in this stack, meet the contract (`tbdkit check-workload`'s first
        check: the functions, their signatures, the Batch, the reference batch)."""
        from tbdkit.agent.workload_checks import Checker

        outcome = Checker(catalog.get(name), framework).contract()
        assert outcome.status == "passed", outcome.detail

    def test_paper_parameter_count(name: str) -> None:
        """The paper preset's parameters, counted without training (PyTorch's on the meta device), against [model]
        params_millions or the difference [checks.paper_parameters] explains (`tbdkit check-workload`'s check)."""
        from tbdkit.agent.workload_checks import Checker

        outcome = Checker(catalog.get(name), framework).paper_parameters()
        assert outcome.status != "failed", outcome.detail

    def test_initial_weights_are_drawn_apart(name: str) -> None:
        """Each random weight its own draw, made after the run's seed (the learning check's network, before its
        first step): no initializer shared by several weights, none made at import time."""
        if framework == "tensorflow":
            made_at_import = import_time_initializers(name)
            assert not made_at_import, made_at_import
        spec = row("learning", framework, name)
        if isinstance(spec, Elsewhere):
            draws = same_draws(initial_weights(adapter(name, framework).training.model, framework))
        else:
            draws = learned(name, framework).same_draws
        if check_settings.of(catalog.get(name), framework).same_draw is not None:
            assert draws, f"{name} on {framework} has [checks.same_draw] but draws each weight apart: remove it"
        else:
            assert not draws, f"{name} on {framework}: one draw gave these weights their initial values: {draws}"

    @legs_of(framework, "compiled")
    def test_compiled_step_matches_standard(name: str) -> None:
        spec = row("parity", framework, name)
        run = parity(name, framework, "standard", "compiled")
        assert run.record["graph"] == "compiled" and run.compiled is not None and run.standard is not None, run.record
        if spec.not_compiled is not None:  # trains as standard, and says why
            assert spec.not_compiled in str(run.record.get("reason")), run.record
        elif framework == "pytorch":
            assert run.record["compilations"] >= 1 and isinstance(run.record["graph_breaks"], int), run.record
        else:
            assert run.record.get("xla", run.record.get("static_shape")) is True, run.record
        if spec.compiled_tol is not None:  # the forward pass before any update agrees tightly
            assert_close_losses(run.compiled[:1], run.standard[:1], spec.forward_tol, f"{name} compiled, first loss")
        expected = run.standard[: len(run.compiled)]
        assert_close_losses(run.compiled, expected, spec.compiled_tol, f"{name} compiled vs standard")

    @legs_of(framework, "bf16")
    def test_bf16_stays_near_fp32(name: str) -> None:
        spec = row("parity", framework, name)
        run = parity(name, framework, "bf16")
        assert run.bf16 is not None
        if spec.bf16_refused is not None:  # refused in one sentence, before or at its first step
            assert isinstance(run.bf16, str) and spec.bf16_refused in run.bf16, run.bf16
            return
        # the adapter names a CPU without AVX-512 (tbdkit.adapters.mxnet.BF16_NO_AVX512) when oneDNN refuses there
        if framework == "mxnet" and isinstance(run.bf16, str) and "need a CPU with AVX-512, and this one has none" in run.bf16:
            pytest.skip("MXNet 1.9's oneDNN has bfloat16 kernels only for CPUs with AVX-512; this one has none")
        assert not isinstance(run.bf16, str), run.bf16
        standard = parity(name, framework, "standard").standard
        assert standard is not None
        assert_close_losses(run.bf16, standard, spec.bf16_tol, f"{name} bf16 vs fp32")

    def test_the_analyses_after_the_window_run(name: str) -> None:
        """`tbdkit check-workload`'s analyses check: the memory breakdown a bench run takes after its window has the
        weights' bytes and every category's bytes or reason; on PyTorch the FLOP count is above zero, elsewhere null
        with the agent's reason (analyses())."""
        failure, said = analyses(name, framework)
        assert failure is None, failure
        flops = "FLOP per sample" if framework == "pytorch" else "counts model FLOPs only on PyTorch"
        assert said.startswith("memory: weights ") and flops in said, said

    return {"name": name, "test_learns_on_a_fixed_batch": test_learns_on_a_fixed_batch,
            "test_every_math_mode_steps": test_every_math_mode_steps,
            "test_smoke_parameter_count": test_smoke_parameter_count,
            "test_workload_file_holds_only_model_code": test_workload_file_holds_only_model_code,
            "test_meets_the_contract": test_meets_the_contract,
            "test_paper_parameter_count": test_paper_parameter_count,
            "test_initial_weights_are_drawn_apart": test_initial_weights_are_drawn_apart,
            "test_compiled_step_matches_standard": test_compiled_step_matches_standard,
            "test_bf16_stays_near_fp32": test_bf16_stays_near_fp32,
            "test_the_analyses_after_the_window_run": test_the_analyses_after_the_window_run}


# ---------------------------------------------------------------------------------------------------
# Model-specific references several stacks share (NumPy only)


def torchvision_roi_align(feats, roi, size, scale, grid):
    """torchvision's roi_align kernel (aligned=False) for one RoI on (C, H, W) features, in NumPy."""
    height, width = feats.shape[1:]

    def bilinear(y, x):
        if y < -1.0 or y > height or x < -1.0 or x > width:
            return np.zeros(feats.shape[0])
        y, x = max(y, 0.0), max(x, 0.0)
        y0, x0 = int(y), int(x)
        if y0 >= height - 1:
            y0 = y1 = height - 1
            y = float(y0)
        else:
            y1 = y0 + 1
        if x0 >= width - 1:
            x0 = x1 = width - 1
            x = float(x0)
        else:
            x1 = x0 + 1
        ly, lx = y - y0, x - x0
        return ((1 - ly) * (1 - lx) * feats[:, y0, x0] + (1 - ly) * lx * feats[:, y0, x1]
                + ly * (1 - lx) * feats[:, y1, x0] + ly * lx * feats[:, y1, x1])

    x1, y1, x2, y2 = roi * scale
    bw, bh = max(x2 - x1, 1.0) / size, max(y2 - y1, 1.0) / size
    gh, gw = grid if grid else (math.ceil(max(y2 - y1, 1.0) / size), math.ceil(max(x2 - x1, 1.0) / size))
    out = np.zeros((feats.shape[0], size, size))
    for py in range(size):
        for px in range(size):
            out[:, py, px] = np.mean([bilinear(y1 + py * bh + (iy + 0.5) * bh / gh, x1 + px * bw + (ix + 0.5) * bw / gw)
                                      for iy in range(gh) for ix in range(gw)], axis=0)
    return out


def assert_same_frames_for_the_same_seed(frames: Callable[[], np.ndarray]) -> None:
    """A3C: `frames()` (an actor's observations for a fixed seed and actions) played twice is the same
    twice, and not blank: the environment runs in this stack and is deterministic."""
    first, second = frames(), frames()
    np.testing.assert_array_equal(first, second)
    assert first.max() > 0


def assert_padding_does_not_change_an_utterance(a: Any, workload: Any, data: Any, hp: dict[str, Any],
                                                padded: Callable[..., Any]) -> None:
    """Deep Speech 2: one utterance (seed 3) padded by `padded(data, batch, noise)` (tests/conftest.py's
    padded_utterance) with zeros, then with loud noise, gives the same log-probabilities over its own
    output frames."""
    batch = next(data.synthetic_batches(hp, 1, seed=3))
    frames = int(batch.feature_lengths[0]) // 2
    quiet, noisy = (workload.forward(a.training, a.prepare(padded(data, batch, n)))[0] for n in (False, True))
    np.testing.assert_allclose(quiet[0, :frames], noisy[0, :frames], atol=1e-5)


def assert_translation_outputs(a: Any, workload: Any, data: Any, hp: dict[str, Any]) -> None:
    """Seq2Seq: forward on a synthetic batch of 3 gives log-probabilities (N, T, target vocabulary) that
    sum to one, and each sentence's target length."""
    batch = next(data.synthetic_batches(hp, 3, seed=0))
    log_probs, lengths = workload.forward(a.training, a.prepare(batch))
    assert log_probs.shape == (*batch.target_in.shape, hp["target_vocab_size"])
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, atol=1e-4)
    assert lengths.tolist() == batch.target_lengths.tolist()


def assert_padding_does_not_change_a_sentence(a: Any, workload: Any, data: Any, hp: dict[str, Any]) -> None:
    """Seq2Seq: a sentence (seed 3, a batch of one: no padding of its own) with 7 junk tokens appended
    beyond its length gives the same log-probabilities."""
    batch = next(data.synthetic_batches(hp, 1, seed=3))
    n = int(batch.source_lengths[0])
    junk = np.concatenate([batch.source, np.full((1, 7), 5, np.int64)], axis=1)
    padded = data.Batch(junk, batch.source_lengths, batch.target_in, batch.target_out, batch.target_lengths)
    quiet, noisy = (workload.forward(a.training, a.prepare(b))[0] for b in (batch, padded))
    assert junk.shape[1] == n + 7
    np.testing.assert_allclose(quiet, noisy, atol=1e-5)


def transformer_parameters(hp: dict[str, Any]) -> int:
    """The Transformer's trainable parameters from its hyperparameters: attention 4 (d x d + d); FFN
    d x f + f + f x d + d; LayerNorm 2d; one d x V table shared by both embeddings and the projection."""
    d, f = hp["d_model"], hp["ffn_hidden"]
    attention, ffn, norm = 4 * (d * d + d), d * f + f + f * d + d, 2 * d
    return (hp["encoder_layers"] * (attention + ffn + 2 * norm) + hp["decoder_layers"] * (2 * attention + ffn + 3 * norm)
            + hp["source_vocab_size"] * d)


def smoothed_cross_entropy_case() -> tuple[np.ndarray, np.ndarray, float, float]:
    """Logits (2, 3, 5), labels with -100 ignored, epsilon 0.1 and, in NumPy, the mean over the labelled
    positions of PyTorch's label-smoothed cross-entropy: (1 - e) x NLL + e x the mean of -log p."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
    labels = np.array([[1, 4, -100], [0, -100, -100]])
    e = 0.1
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    per = [(1 - e) * -logp[i, j, labels[i, j]] - e * logp[i, j].mean() for i, j in zip(*np.nonzero(labels >= 0))]
    return logits, labels, e, float(np.mean(per))
