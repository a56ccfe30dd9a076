"""What a run records of the workload it trained: the hyperparameters it resolved and a sha256 of every
file of the model's folder and of the kit's `_shared` files those import, so a bundle of the run says
exactly which code and values made its numbers (spec.json's `workload`).

The files of a model's folder are every regular file in it and its folders, except its committed
reference results (`reference/`), byte-code caches and hidden files. The `_shared` files are found by
reading the folder's Python files' imports (`from _shared import x`, `from _shared.x import y`,
`import _shared.x`), and those files' own imports of each other, without running anything.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tbdkit.core.errors import UserError
from tbdkit.core.paths import workloads_dir
from tbdkit.spec import catalog

SHARED = "_shared"
LEFT_OUT = ("reference", "__pycache__")  # folders of a model's that are not its code or settings
MAX_FILES = 1_000  # a model's code and settings; a dataset lives elsewhere (--data)
MAX_BYTES = 64 * 2**20


class WorkloadRecord(BaseModel):
    """spec.json's `workload`: written by the launcher for each run (never typed by a user)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    origin: str = Field(description="kit, outside (--workloads, TBDKIT_WORKLOAD_PATH) or bundled (reproduce)")
    folder: str = Field(description="workloads/<model> for the kit's own, else the folder's path where it ran")
    hparams: dict[str, Any] = Field(description="the resolved hyperparameters the run trained with")
    files: dict[str, str] = Field(max_length=MAX_FILES, description="file below the folder -> sha256")
    shared: dict[str, str] = Field(
        default_factory=dict, max_length=MAX_FILES, description="_shared/<file> it imports -> sha256"
    )


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def folder_files(folder: Path) -> list[PurePosixPath]:
    """The files of a model's folder that are its code and settings (the module's docstring), sorted."""
    out = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(p.startswith(".") or p in LEFT_OUT for p in rel.parts) or path.is_symlink() or not path.is_file():
            continue
        out.append(PurePosixPath(rel.as_posix()))
    return out


def _shared_imports(source: str) -> set[str]:
    """The `_shared` modules a Python file imports (`torch_amp`, `batches`, ...; `__init__` for the package)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and module == SHARED:
                found.add("__init__")
                found.update(a.name for a in node.names)
            elif node.level == 0 and module.startswith(f"{SHARED}."):
                found.update(("__init__", module.split(".")[1]))
            elif node.level == 1:  # inside _shared: `from . import x`, `from .x import y`
                found.update([module.split(".")[0]] if module else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == SHARED or alias.name.startswith(f"{SHARED}."):
                    found.update(("__init__", *alias.name.split(".")[1:2]))
    return found


def shared_files(sources: list[str], shared_dir: Path) -> list[Path]:
    """The files of `shared_dir` the sources import, and those they import in turn."""
    todo = set().union(*(_shared_imports(s) for s in sources)) if sources else set()
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        path = shared_dir / f"{name}.py"
        if name in seen or not path.is_file():
            continue
        seen[name] = path
        todo |= _shared_imports(path.read_text(errors="replace"))
    return [seen[n] for n in sorted(seen)]


def record(model: catalog.Model, hparams: dict[str, Any]) -> WorkloadRecord:
    """The record of `model` as it is on disk now, with the hyperparameters a run resolved."""
    found = folder_files(model.folder)
    size = sum((model.folder / rel).stat().st_size for rel in found)
    if len(found) > MAX_FILES or size > MAX_BYTES:
        raise UserError(
            f"The model folder {model.folder} holds {len(found):,} files of {size / 2**20:,.0f} MiB, more than a model's "
            f"code and settings ({MAX_FILES:,} files, {MAX_BYTES // 2**20} MiB, every run records and every bundle "
            "carries them): move its data out of it and pass the data with --data."
        )
    files = {str(rel): sha256_file(model.folder / rel) for rel in found}
    sources = [(model.folder / rel).read_text(errors="replace") for rel in map(Path, files) if rel.suffix == ".py"]
    shared_dir = workloads_dir() / SHARED
    shared = {f"{SHARED}/{p.name}": sha256_file(p) for p in shared_files(sources, shared_dir)}
    # the kit's own model by its place in the kit (a spec.json that holds nothing of this machine's); a user's by its path
    folder = f"workloads/{model.folder.name}" if model.origin == catalog.KIT else str(model.folder)
    return WorkloadRecord(origin=model.origin, folder=folder, hparams=hparams, files=files, shared=shared)


def differences(recorded: dict[str, str], here: dict[str, str]) -> list[str]:
    """The files that differ between two {file: sha256} maps: changed, only recorded, only here."""
    return sorted(n for n in set(recorded) | set(here) if recorded.get(n) != here.get(n))
