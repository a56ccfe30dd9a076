"""The models the kit knows: read from workloads/*/workload.toml and the files beside it."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from tbdkit.core.errors import UserError
from tbdkit.core.frameworks import KNOWN_FRAMEWORKS
from tbdkit.core.paths import workloads_dir
from tbdkit.core.user_files import load_toml

PRESETS = ("smoke", "paper", "converge")


@dataclass(frozen=True)
class Model:
    name: str
    folder: Path
    info: dict[str, Any]
    hparams: dict[str, Any]
    presets: dict[str, dict[str, Any]]
    frameworks: tuple[str, ...] = field(default=())
    # [setting.<name>] tables: other settings of the model (e.g. BERT's 512-token pre-training, SQuAD)
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def throughput_unit(self) -> str:
        return str(self.info["throughput_unit"])

    @property
    def dominant_layer(self) -> str:
        """The layer kind that dominates the model's compute, as the TBD paper classifies it (Table I):
        "CONV", "LSTM", "Attention", "RNN (GRU)", ...; the report groups models by it."""
        return str(self.info["dominant_layer"])

    @property
    def sample_unit(self) -> str:
        return str(self.info.get("sample_unit", "samples/s"))

    def hp(self, preset: str, variant: str | None = None) -> dict[str, Any]:
        """The flat hyperparameters of a preset: [hparams] < [setting.<variant>] < [preset.<name>]
        < [setting.<variant>.preset.<name>] (what a setting changes within one preset, e.g. its batch sweep)."""
        if preset not in self.presets:
            raise UserError(f"Model '{self.name}' has no preset '{preset}': choose one of {', '.join(self.presets)}.")
        self.check_variant(variant)
        setting = dict(self.variants.get(variant or "", {}))
        within = setting.pop("preset", {}).get(preset, {})
        merged = {**self.hparams, **setting, **self.presets[preset], **within}
        merged.pop("description", None)
        return merged

    def check_variant(self, variant: str | None) -> None:
        if variant is not None and variant not in self.variants:
            declared = f"choose one of {', '.join(self.variants)}" if self.variants else "it declares none"
            raise UserError(
                f"Model '{self.name}' has no variant '{variant}' ([setting.{variant}] in its "
                f"workload.toml): {declared}, or leave --variant out."
            )

    def default_batch(self, preset: str) -> int:
        return int(self.hp(preset)["default_batch"])


def _load(folder: Path) -> Model:
    data = load_toml(folder / "workload.toml")  # a regular file, nested no deeper than TOML's reader follows
    if "dominant_layer" not in data.get("model", {}):
        raise UserError(
            f"{folder / 'workload.toml'} has no [model] dominant_layer: add the layer kind that "
            'dominates its compute ("CONV", "LSTM", "Attention", ...), as the paper\'s Table I.'
        )
    frameworks = tuple(f for f in KNOWN_FRAMEWORKS if (folder / f"{f}.py").is_file())
    return Model(
        name=data["model"]["name"],
        folder=folder,
        info=data["model"],
        hparams=data.get("hparams", {}),
        presets=data.get("preset", {}),
        frameworks=frameworks,
        variants=data.get("setting", {}),
    )


def model_in(folder: Path) -> Model:
    """The model of one folder (its workload.toml and the files beside it), wherever the folder lies."""
    return _load(folder)


@lru_cache(maxsize=4)
def _models(root: str) -> dict[str, Model]:
    found = {}
    for toml in sorted(Path(root).glob("*/workload.toml")):
        model = _load(toml.parent)
        found[model.name] = model
    return found


def models() -> dict[str, Model]:
    return _models(str(workloads_dir()))


def get(name: str) -> Model:
    known = models()
    if name not in known:
        raise UserError(f"Unknown model '{name}': known models are {', '.join(known) or '(none)'}.")
    return known[name]


def check_framework(model: Model, framework: str) -> None:
    if framework not in KNOWN_FRAMEWORKS:
        raise UserError(f"Unknown framework '{framework}': known frameworks are {', '.join(KNOWN_FRAMEWORKS)}.")
    if framework not in model.frameworks:
        raise UserError(
            f"Model '{model.name}' has no {framework} implementation yet: it has "
            f"{', '.join(model.frameworks) or 'none'}."
        )


def workloads_on_path() -> None:
    """Put workloads/ on the import path, once, so that a workload file can import the package its
    family shares (`from _shared import ...`); no workload file touches sys.path itself."""
    root = str(workloads_dir())
    if root not in sys.path:
        sys.path.append(root)


def is_data_error(exc: BaseException) -> bool:
    """Whether `exc` is the workloads' DataError (workloads/_shared/errors.py): a problem with the data
    that its user can fix, reported as its one sentence without a traceback. A raised DataError's
    module is already imported, so this imports nothing."""
    shared = sys.modules.get("_shared.errors")
    return shared is not None and isinstance(exc, shared.DataError)


def load_module(model: Model, part: str) -> ModuleType:
    """Import workloads/<model>/<part>.py by path (workloads are files, not an installed package)."""
    workloads_on_path()
    path = model.folder / f"{part}.py"
    name = f"tbdkit_workloads.{model.name}.{part}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"Cannot load {path}: the workload file is missing.")
    module = importlib.util.module_from_spec(spec)
    # its parents too, empty: a name that imports is one pickle can refer to (torch.compile's caches
    # pickle their keys, which may name objects through the workload's module)
    for parent in ("tbdkit_workloads", f"tbdkit_workloads.{model.name}"):
        sys.modules.setdefault(parent, ModuleType(parent))
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def check_source(model: Model, path: str, hp: dict[str, Any], full: bool = False) -> str:
    """The model's data reader's check of a dataset folder (what it found, in words); a file it may not
    read (permissions, a name too long, /proc's entries) is one sentence naming it, not a traceback."""
    try:
        return str(load_module(model, "data").check_source(path, hp, **({"full": True} if full else {})))
    except OSError as exc:
        where = exc.filename if exc.filename is not None else path
        raise UserError(
            f"Reading the dataset at {path} failed on {str(where)[:200]} ({exc.strerror or exc}): pass a folder "
            "holding the dataset, every file of it readable by you."
        ) from None
