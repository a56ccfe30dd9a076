"""Where the kit finds its own files and keeps its state, each overridable by environment."""

from __future__ import annotations

import os
from pathlib import Path

from tbdkit.core.errors import UserError

KIT_ROOT = Path(__file__).resolve().parents[2]
SWEEPS = "sweeps"  # a results folder's sweeps/<sweep-id>/ (tbdkit.results.files.SWEEPS)


KIT_WORKLOADS = KIT_ROOT / "workloads"
# A user's own model folders, added to the kit's (tbdkit.spec.catalog): a `:`-separated list of folders,
# each a model's folder (holding workload.toml) or a folder of model folders (`--workloads DIR` adds to it).
WORKLOAD_PATH_ENV = "TBDKIT_WORKLOAD_PATH"
# Set by `tbdkit reproduce` for the runs it starts: the bundle's own copies of its models' folders, run
# instead of a same-named model installed here (the agent reads it as the host does).
BUNDLED_WORKLOADS_ENV = "TBDKIT_BUNDLED_WORKLOADS"


def workloads_dir() -> Path:
    """The kit's own folder of models, workloads/<model>/ (and workloads/_shared/)."""
    return KIT_WORKLOADS


SYSTEM_FOLDERS = ("/proc", "/sys", "/dev")  # the kernel's: nothing of the kit's is ever made there


def venvs_dir() -> Path:
    """The folder holding one virtual environment per framework stack (TBDKIT_VENVS overrides): a folder, or a
    path where one can be made; anything else (empty, a file, a path under a file, a dangling link, a system
    folder) is a UserError that names it."""
    raw = os.environ.get("TBDKIT_VENVS")
    if raw is None:
        return KIT_ROOT / ".venvs"
    fix = "set TBDKIT_VENVS to a folder for the stacks' environments, or unset it for the kit's .venvs"
    if not raw.strip():
        raise UserError(f"TBDKIT_VENVS is set but empty: {fix}.")
    path = Path(raw)
    if path.is_symlink() and not path.exists():
        raise UserError(f"TBDKIT_VENVS={raw} is a link to {os.readlink(path)}, which does not exist: {fix}.")
    resolved = path.resolve()
    if any(resolved == Path(s) or Path(s) in resolved.parents for s in SYSTEM_FOLDERS):
        raise UserError(f"TBDKIT_VENVS={raw} is in the system folder {resolved}: {fix}.")
    if path.exists() and not path.is_dir():
        raise UserError(f"TBDKIT_VENVS={raw} is a file, not a folder: {fix}.")
    blocker = next((p for p in resolved.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise UserError(f"TBDKIT_VENVS={raw} is under {blocker}, which is a file: {fix}.")
    return path


def default_results_dir() -> Path:
    return Path(os.environ.get("TBDKIT_RESULTS", "results"))


def existing_results_dir(path: Path) -> Path:
    """`path` if it is a folder; a UserError otherwise. Commands that only read results (runs,
    show, report, bundle) call this first, so a mistyped folder is named and never created."""
    if path.is_dir():
        return path
    what = f"{path} is a file, not a results folder" if path.exists() else f"No results folder at {path}"
    raise UserError(
        f"{what}: pass the folder that holds your runs (--results/-r, or the RESULTS argument), "
        "or run `tbdkit bench` first."
    )
