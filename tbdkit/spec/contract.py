"""The workload contract in code: what a model folder provides (workloads/README.md), and the checks of a
folder against it, one sentence per gap, each naming the file, what is missing or wrong, and the fix.

The data part runs wherever NumPy does (the kit's own venv); a framework file's part is checked on the module
loaded in its framework's stack. Whatever the kit needs to know about a batch comes through here: its samples
and work (the Batch's properties) and its inputs (its NumPy-valued dataclass fields, never guessed by name)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from tbdkit.core.frameworks import KNOWN_FRAMEWORKS
from tbdkit.spec import catalog

try:
    import tomllib  # novermin
except ModuleNotFoundError:  # Python 3.10 (the MXNet image): tomli is the same parser
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass(frozen=True)
class Function:
    """One function of the contract: the positional arguments the kit calls it with (and keywords it may
    pass), what it returns, and what it is for."""

    name: str
    args: tuple[str, ...]
    returns: str
    purpose: str
    keywords: tuple[str, ...] = ()

    @property
    def signature(self) -> str:
        given = [*self.args, *(f"{k}=..." for k in self.keywords)]
        return f"def {self.name}({', '.join(given)}) -> {self.returns}"

    def accepts(self, fn: Callable[..., Any]) -> bool:
        """Whether `fn` can be called as the kit calls it (its arguments by position, the keywords by name)."""
        try:
            inspect.signature(fn).bind(*self.args, **{k: None for k in self.keywords})
        except TypeError:
            return False
        except ValueError:  # a builtin without a signature: take it on trust
            return True
        return True


DATA_FUNCTIONS = (
    Function("batches", ("source", "hp", "batch_size", "seed"), "Iterator[Batch]",
             'batches from "synthetic" or a dataset path, raising DataError on a bad source'),
    Function("reference_batch", ("hp",), "Batch", "the one fixed sample `tbdkit describe` traces"),
    Function("check_source", ("source", "hp"), "str", "a dataset's check before a run, in words",
             keywords=("full",)),
)  # fmt: skip
# describe's output probe: probe_batch where the model has one, else two synthetic samples
PROBE_FUNCTIONS = (
    Function("probe_batch", ("hp",), "Batch", "the batch describe's output probe runs"),
    Function("synthetic_batches", ("hp", "batch_size", "seed"), "Iterator[Batch]", "synthetic batches"),
)
CONVERGE_FUNCTIONS = (
    Function("convergence_task", ("source", "hp", "batch_size", "seed"), "ConvergenceTask",
             "the converge preset's small real task"),
    Function("quality", ("outputs", "held_out"), "float", "the metric quality_metric and target name"),
)  # fmt: skip
# optional: the input shape `describe` reports, where the batch's first array is not one sample's input
INPUT_SHAPE = Function("input_shape", ("batch", "hp"), "list[int]", "one sample's input shape, as describe reports it")
FRAMEWORK_FUNCTIONS = (
    Function("build", ("hp", "device"), "Training",
             "the model and optimizer (TensorFlow is handed the precision, under the device)"),
    Function("to_device", ("batch", "device"), "dict[str, Any]", "the batch's arrays as the framework's tensors"),
    Function("train_step", ("training", "inputs", "precision"), "loss", "one iteration: forward, loss, backward, update"),
    Function("forward", ("training", "inputs"), "outputs", "the inference pass, outputs as NumPy"),
)  # fmt: skip
BATCH_PROPERTIES = ("samples", "work")  # optional: extra_work, padded_work

MODEL_KEYS = (
    "name", "title", "application", "dominant_layer", "dataset", "dataset_layout", "throughput_unit",
    "throughput_description", "sample_unit", "source",
)  # fmt: skip  # optional: implementation, params_millions (the published size the checks compare)
HPARAM_KEYS = ("input_shapes",)
REQUIRED_PRESETS = ("smoke", "paper")
PRESET_KEYS = ("description", "batch_sizes", "default_batch")


def _shown(path: Path) -> str:
    """A path as a user reads it: relative to the working folder where it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def toml_gaps(folder: Path) -> list[str]:
    """workload.toml against the contract: it exists and parses, [model]'s keys, [hparams]' input_shapes, the
    smoke and paper presets and their keys."""
    path = folder / "workload.toml"
    where = _shown(path)
    if not path.is_file():
        return [f"{where} is missing: write the model's workload.toml ([model], [hparams], [preset.smoke], "
                "[preset.paper]), as workloads/README.md describes."]  # fmt: skip
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return [f"{where} cannot be read ({exc}): fix it so that it parses as TOML."]
    gaps = []
    model = data.get("model", {})
    gaps += [f"{where} has no [model] {key}: add it (workloads/README.md lists what each key holds)."
             for key in MODEL_KEYS if key not in model]  # fmt: skip
    if "name" in model and model["name"] != folder.name:
        gaps.append(f"{where} names the model '{model['name']}' in a folder named '{folder.name}': make [model] "
                    "name the folder's name.")  # fmt: skip
    gaps += [f"{where} has no [hparams] {key}: add it (\"fixed\" or \"variable\": whether cuDNN autotuning is on)."
             for key in HPARAM_KEYS if key not in data.get("hparams", {})]  # fmt: skip
    presets = data.get("preset", {})
    for preset in (*REQUIRED_PRESETS, *(["converge"] if "converge" in presets else [])):
        if preset not in presets:
            gaps.append(f"{where} has no [preset.{preset}]: add it with {', '.join(PRESET_KEYS)}.")
            continue
        gaps += [f"{where} has no {key} in [preset.{preset}]: add it." for key in PRESET_KEYS
                 if key not in presets[preset]]  # fmt: skip
    return gaps


def function_gaps(module: ModuleType, path: Path, functions: tuple[Function, ...]) -> list[str]:
    """Each function of `functions` exists in `module` and takes the arguments the kit passes it."""
    gaps = []
    for f in functions:
        fn = getattr(module, f.name, None)
        if not callable(fn):
            gaps.append(f"{_shown(path)} has no function {f.name}: add `{f.signature}` ({f.purpose}).")
        elif not f.accepts(fn):
            gaps.append(f"{_shown(path)}'s {f.name}{_signature_of(fn)} cannot be called as the kit calls it: make it "
                        f"`{f.signature}`.")  # fmt: skip
    return gaps


def _signature_of(fn: Callable[..., Any]) -> str:
    """`fn`'s parameters as written, less their annotations: `(source, hp, full=False)`."""
    try:
        params = inspect.signature(fn).parameters.values()
    except ValueError:
        return "(...)"
    return f"({', '.join(str(p.replace(annotation=inspect.Parameter.empty)) for p in params)})"


def batch_class_gaps(data: ModuleType, path: Path) -> list[str]:
    """data.py's Batch: a dataclass with the properties samples and work."""
    where = _shown(path)
    batch = getattr(data, "Batch", None)
    if batch is None:
        return [f"{where} has no Batch: add a frozen dataclass of NumPy arrays with the properties samples and work."]
    if not (isinstance(batch, type) and dataclasses.is_dataclass(batch)):
        return [f"{where}'s Batch is not a dataclass: make it a frozen @dataclass of NumPy arrays."]
    names = {f.name for f in dataclasses.fields(batch)}
    return [f"{where}'s Batch has no {p}: add a property `{p}` ({_PROPERTY_DOC[p]})." for p in BATCH_PROPERTIES
            if p not in names and not hasattr(batch, p)]  # fmt: skip


_PROPERTY_DOC = {"samples": "its samples, an int", "work": "its work in the model's throughput unit, a float"}


def batch_inputs(batch: Any) -> dict[str, Any]:
    """A batch's inputs, in field order: its dataclass fields that hold a NumPy array, or a list of them (images of
    their own sizes)."""
    if not dataclasses.is_dataclass(batch):
        return {}
    found = {}
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        if isinstance(value, np.ndarray) or (
            isinstance(value, list | tuple) and value and all(isinstance(v, np.ndarray) for v in value)
        ):
            found[f.name] = value
    return found


def input_shape(data: ModuleType, batch: Any, hp: dict[str, Any]) -> list[int]:
    """One sample's input shape, as `describe` reports it: data.py's input_shape(batch, hp) where it has one, else
    its first input (batch_inputs) less the batch axis, or, a list of arrays, the first array's shape."""
    own = getattr(data, "input_shape", None)
    if callable(own):
        return [int(n) for n in own(batch, hp)]
    inputs = batch_inputs(batch)
    if not inputs:
        raise ValueError("the batch has no NumPy array field")
    first = next(iter(inputs.values()))
    return [int(n) for n in (first.shape[1:] if isinstance(first, np.ndarray) else first[0].shape)]


def reference_gaps(data: ModuleType, path: Path, hp: dict[str, Any]) -> list[str]:
    """reference_batch(hp) of the smoke preset: a dataclass whose samples and work are positive numbers and whose
    inputs give describe an input shape."""
    where = _shown(path)
    try:
        batch = data.reference_batch(hp)
    except Exception as exc:  # a user's code: its failure is the gap
        return [f"{where}'s reference_batch(hp) raised {type(exc).__name__} ({exc}) on the smoke preset: fix it."]
    name = type(batch).__name__
    if not dataclasses.is_dataclass(batch):
        return [f"{where}'s reference_batch(hp) returns a {name}, not a dataclass: return a Batch."]
    gaps = []
    for prop, kind in (("samples", int), ("work", float)):
        value = getattr(batch, prop, None)
        if value is None:
            gaps.append(f"{where}'s reference batch ({name}) has no {prop}: add a property `{prop}` "
                        f"({_PROPERTY_DOC[prop]}).")  # fmt: skip
        elif not isinstance(value, int | float | np.number) or not value > 0:
            gaps.append(f"{where}'s reference batch's {prop} is {value!r}: make it a positive {kind.__name__}.")
    try:
        input_shape(data, batch, hp)
    except Exception as exc:  # a user's code (input_shape), or a batch without arrays
        gaps.append(f"{where}'s reference batch ({name}) gives describe no input shape ({exc}): hold its inputs as "
                    "NumPy array fields, or add `def input_shape(batch, hp) -> list[int]`.")  # fmt: skip
    return gaps


def data_gaps(model: catalog.Model) -> list[str]:
    """data.py against the contract: loaded, its functions and their signatures, its Batch, the reference batch."""
    path = model.folder / "data.py"
    if not path.is_file():
        return [f"{_shown(path)} is missing: write the model's data.py (Batch, batches, reference_batch, "
                "check_source), as workloads/README.md describes."]  # fmt: skip
    try:
        data = catalog.load_module(model, "data")
    except Exception as exc:  # a user's file: its import error is the gap
        return [f"{_shown(path)} cannot be imported ({type(exc).__name__}: {exc}): fix it (NumPy only, no framework)."]
    gaps = function_gaps(data, path, DATA_FUNCTIONS) + batch_class_gaps(data, path)
    probes = [f for f in PROBE_FUNCTIONS if callable(getattr(data, f.name, None))]
    if not probes:
        gaps.append(f"{_shown(path)} has neither probe_batch nor synthetic_batches: add "
                    f"`{PROBE_FUNCTIONS[1].signature}` (describe's output probe takes two synthetic samples).")  # fmt: skip
    gaps += function_gaps(data, path, tuple(probes))
    if callable(getattr(data, INPUT_SHAPE.name, None)):
        gaps += function_gaps(data, path, (INPUT_SHAPE,))
    if "converge" in model.presets:
        # a task that scores itself (A3C's episodes' returns: its ConvergenceTask.score()) needs no quality
        scores = callable(getattr(getattr(data, "ConvergenceTask", None), "score", None))
        gaps += function_gaps(data, path, CONVERGE_FUNCTIONS[:1] if scores else CONVERGE_FUNCTIONS)
    if not gaps:
        gaps += reference_gaps(data, path, model.hp("smoke"))
    return gaps


def framework_gaps(model: catalog.Model, framework: str, module: ModuleType | None = None) -> list[str]:
    """A framework file against the contract: its four functions and their signatures. `module`: the file as
    loaded in its stack (loaded here where not given)."""
    path = model.folder / f"{framework}.py"
    if module is None:
        try:
            module = catalog.load_module(model, framework)
        except Exception as exc:  # a user's file: its import error is the gap
            return [f"{_shown(path)} cannot be imported in the {framework} stack ({type(exc).__name__}: {exc}): "
                    "fix it."]  # fmt: skip
    return function_gaps(module, path, FRAMEWORK_FUNCTIONS)


def folder_gaps(folder: Path) -> list[str]:
    """What a model folder lacks of the contract that NumPy alone can check: workload.toml, data.py, and at least
    one framework file (whose functions its stack checks)."""
    folder = Path(folder)
    if not folder.is_dir():
        return [f"{_shown(folder)} is not a folder: name a model folder holding workload.toml and data.py."]
    gaps = toml_gaps(folder)
    if not any((folder / f"{f}.py").is_file() for f in KNOWN_FRAMEWORKS):
        gaps.append(f"{_shown(folder)} has no framework file: add one of "
                    f"{', '.join(f + '.py' for f in KNOWN_FRAMEWORKS)}.")  # fmt: skip
    if gaps:
        return gaps
    return data_gaps(catalog.model_in(folder))


# A framework file holds only the model, the optimizer and the step: no timing, logging or profiling, no import of
# the kit, and no copy of the loss-scaling step its stack's workloads share (workloads/_shared/torch_amp.py, tf_amp.py)
NOT_MODEL_CODE = {
    r"\bimport time\b": "timing",
    r"\blogging\b": "logging",
    r"\bprint\(": "printing",
    r"profiler": "profiling",
    r"perf_counter": "timing",
    r"tbdkit": "the kit (workload files never import it)",
}
SHARED_STEP = {
    "pytorch": {r"\.scaler\.(step|update)\(": "a copy of _shared/torch_amp.scaled_update"},
    "tensorflow": {r"\.scale_loss\(": "a copy of _shared/tf_amp.scaled_update"},
    "mxnet": {},
}


def code_gaps(model: catalog.Model, framework: str) -> list[str]:
    """A framework file that holds more than model code: one sentence per kind of code it should not hold."""
    path = model.folder / f"{framework}.py"
    source = path.read_text()
    return [
        f"{_shown(path)} holds {what} (`{re.search(pattern, source).group(0)}`): leave it to the kit, which "  # type: ignore[union-attr]
        "times, logs and profiles every run the same way, and keep only the model, optimizer and step."
        for pattern, what in {**NOT_MODEL_CODE, **SHARED_STEP.get(framework, {})}.items()
        if re.search(pattern, source)
    ]
