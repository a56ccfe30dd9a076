"""The models the kit knows: its own workloads/*/workload.toml and the files beside them, and the user's
model folders added by `--workloads DIR` or TBDKIT_WORKLOAD_PATH (never replacing the kit's: a name both
hold is refused, naming both folders)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from tbdkit.core.errors import UserError
from tbdkit.core.frameworks import KNOWN_FRAMEWORKS
from tbdkit.core.paths import BUNDLED_WORKLOADS_ENV, WORKLOAD_PATH_ENV, workloads_dir
from tbdkit.core.user_files import load_toml, tomllib

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
    origin: str = "kit"  # kit | outside (--workloads, TBDKIT_WORKLOAD_PATH) | bundled (reproduce's copy)

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


# A model's name names its run folders, its modules (tbdkit_workloads.<name>.<part>) and a container's mount.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,63}")
KIT, OUTSIDE, BUNDLED = "kit", "outside", "bundled"  # where a model's folder comes from (Model.origin)
WHICH = {
    KIT: "the kit's own model",
    OUTSIDE: "a model of --workloads or TBDKIT_WORKLOAD_PATH",
    BUNDLED: "the bundle's copy",
}
ACCEPTS = (
    "pass a model's folder (the one holding workload.toml) or a folder whose folders are models "
    "(<dir>/<model>/workload.toml)"
)


def _load(folder: Path, origin: str = KIT) -> Model:
    toml = folder / "workload.toml"
    try:
        data = load_toml(toml)  # a regular file, nested no deeper than TOML's reader follows
    except OSError as exc:
        raise UserError(
            f"{toml} cannot be read ({exc.strerror or exc}): make it readable by you (chmod u+r)."
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise UserError(f"{toml} is not valid TOML ({why}): fix it (workloads/README.md shows the tables).") from None
    info = data.get("model")
    if not isinstance(info, dict) or not isinstance(info.get("name"), str):
        raise UserError(f'{toml} has no [model] name: add a [model] table with name = "<your model>".')
    if not _NAME.fullmatch(info["name"]):
        raise UserError(
            f"{toml} names its model {info['name'][:80]!r}: a model's name is letters, digits and '_' "
            "(at most 64, not starting with '_'); rename it."
        )
    if "dominant_layer" not in info:
        raise UserError(
            f"{toml} has no [model] dominant_layer: add the layer kind that "
            'dominates its compute ("CONV", "LSTM", "Attention", ...), as the paper\'s Table I.'
        )
    frameworks = tuple(f for f in KNOWN_FRAMEWORKS if (folder / f"{f}.py").is_file())
    return Model(
        name=info["name"],
        folder=folder,
        info=info,
        hparams=data.get("hparams", {}),
        presets=data.get("preset", {}),
        frameworks=frameworks,
        variants=data.get("setting", {}),
        origin=origin,
    )


def model_in(folder: Path) -> Model:
    """The model of one folder (its workload.toml and the files beside it), wherever the folder lies."""
    kit = folder.resolve().parent == workloads_dir().resolve()
    return _load(folder, KIT if kit else OUTSIDE)


def model_folders(entry: Path) -> list[Path]:
    """The model folders an outside folder holds: itself when it holds workload.toml, else each folder
    directly inside it that does; one sentence and the fix when it holds none or cannot be read."""
    try:
        if (entry / "workload.toml").is_file():
            return [entry]
        if not entry.is_dir():
            what = "is a file" if entry.exists() else "does not exist"
            raise UserError(f"The workloads folder {entry} {what}: {ACCEPTS}.")
        found = sorted(p.parent for p in entry.glob("*/workload.toml"))
        if not found:
            deeper = sorted(entry.glob("*/*/workload.toml"))
            where = f" (one lies deeper, at {deeper[0]})" if deeper else ""
            raise UserError(
                f"The workloads folder {entry} holds no workload.toml, at its top or one folder down{where}: {ACCEPTS}."
            )
        return found
    except PermissionError as exc:
        raise UserError(
            f"The workloads folder {entry} cannot be read ({exc.strerror}): make it readable by you "
            f"(chmod -R u+rX {entry}), or pass another."
        ) from None


def _entries(text: str) -> tuple[Path, ...]:
    seen: dict[Path, None] = {}
    for part in text.split(os.pathsep):
        if part.strip():
            seen.setdefault(Path(part).expanduser().absolute(), None)
    return tuple(seen)


def outside_folders() -> tuple[Path, ...]:
    """The user's folders of TBDKIT_WORKLOAD_PATH (`--workloads` adds to it), absolute, in order."""
    return _entries(os.environ.get(WORKLOAD_PATH_ENV, ""))


def bundled_folders() -> tuple[Path, ...]:
    """The model folders `tbdkit reproduce` unpacked from its bundle (TBDKIT_BUNDLED_WORKLOADS)."""
    return _entries(os.environ.get(BUNDLED_WORKLOADS_ENV, ""))


def add_outside(folders: list[Path]) -> None:
    """Add `folders` to the models every command and every agent it starts sees: they go on
    TBDKIT_WORKLOAD_PATH in this process's environment, which the launchers pass on to the agent."""
    if not folders:
        return
    given = _entries(os.pathsep.join(str(f) for f in folders))  # each may be a `:`-separated list (make's WORKLOADS)
    for folder in given:
        model_folders(folder)  # one sentence now, before any command's work
    joined = _entries(os.pathsep.join([*map(str, given), os.environ.get(WORKLOAD_PATH_ENV, "")]))
    os.environ[WORKLOAD_PATH_ENV] = os.pathsep.join(map(str, joined))


def use_bundled(folders: list[Path]) -> None:
    """Run the bundle's copies of its models (reproduce): TBDKIT_BUNDLED_WORKLOADS, for this process and its agents."""
    os.environ[BUNDLED_WORKLOADS_ENV] = os.pathsep.join(str(f.absolute()) for f in folders)


def env_of(model: Model) -> str:
    """The variable that hands a model from outside the kit to an agent in a container or on another node."""
    return BUNDLED_WORKLOADS_ENV if model.origin == BUNDLED else WORKLOAD_PATH_ENV


def _clash(model: Model, other: Model) -> UserError:
    return UserError(
        f"The model name '{model.name}' of {model.folder} is also {WHICH[other.origin]} at {other.folder}: "
        "rename one (its workload.toml's [model] name) or leave one folder out."
    )


@lru_cache(maxsize=8)
def _models(root: str, outside: tuple[Path, ...], bundled: tuple[Path, ...]) -> dict[str, Model]:
    found: dict[str, Model] = {}
    for toml in sorted(Path(root).glob("*/workload.toml")):
        model = _load(toml.parent)
        found[model.name] = model
    for entry in outside:
        for folder in model_folders(entry):
            model = _load(folder, OUTSIDE)
            other = found.get(model.name)
            if other is not None and other.folder.resolve() != folder.resolve():
                raise _clash(model, other)
            if other is None:
                found[model.name] = model
    for entry in bundled:  # the bundle's copy runs, whatever is installed under its name
        for folder in model_folders(entry):
            model = _load(folder, BUNDLED)
            found[model.name] = model
    return found


def models() -> dict[str, Model]:
    """The kit's models and the user's (TBDKIT_WORKLOAD_PATH, --workloads), by name."""
    return _models(str(workloads_dir()), outside_folders(), bundled_folders())


def get(name: str) -> Model:
    known = models()
    if name not in known:
        raise UserError(
            f"Unknown model '{name}': known models are {', '.join(known) or '(none)'} (a model of your own: "
            "--workloads DIR)."
        )
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
