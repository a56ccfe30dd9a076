"""Where a command may write what a user asks for with -o: never into a run folder, never over a file
the kit wrote there, never into a results folder's own layout.

A run folder is complete or marked failed, and its spec.json is what `reproduce` re-runs: a report,
launch file or bundle written into it (or over one of its files) would make it say something else.
So `report -o`, `render -o` and `bundle -o` check their target here first.
"""

from __future__ import annotations

import os
from pathlib import Path

from tbdkit.core.errors import UserError
from tbdkit.results import files

INDEX = "index.sqlite"
CALIBRATION = "calibration.json"
# The kit's files at the top of a results folder (the index, the calibration, the sweeps' folder).
RESULTS_FILES = frozenset({INDEX, f"{INDEX}-journal", f"{INDEX}-wal", f"{INDEX}-shm", CALIBRATION, files.SWEEPS})


def is_run_folder(path: Path) -> bool:
    """A folder the kit made for a run: it holds a summary.json, or a spec.json and another run file
    (a run still going has its spec.json and log.txt). A folder of launch files (`tbdkit render`)
    holds a spec.json and no other run file."""
    try:
        if not path.is_dir():
            return False
        names = {e.name for e in os.scandir(path) if e.is_file(follow_symlinks=False)}
    except OSError:
        return False
    return files.SUMMARY in names or (files.SPEC in names and len(names & (files.RUN_FILES - {files.SPEC})) > 0)


def is_results_folder(path: Path) -> bool:
    """A folder holding runs: the index, a calibration, the sweeps' folder, or a run folder."""
    try:
        if not path.is_dir():
            return False
        with os.scandir(path) as it:
            for entry in it:
                if entry.name in RESULTS_FILES or (
                    entry.is_dir(follow_symlinks=False) and is_run_folder(Path(entry.path))
                ):
                    return True
    except OSError:
        return False
    return False


def _inside_a_run(path: Path) -> Path | None:
    """The run folder `path` is in (or is), if any."""
    for folder in [path, *path.parents]:
        if is_run_folder(folder):
            return folder
    return None


def check_folder(out: Path, option: str) -> None:
    """A UserError unless `out` is a folder the command may write its files into."""
    target = out.absolute()
    run = _inside_a_run(target)
    if run is not None:
        raise UserError(
            f"{option} {out} is {'a run folder' if run == target else f'inside the run folder {run}'}: writing "
            f"there would change the run's record; pass {option} a folder of its own, e.g. {option} report."
        )
    if is_results_folder(target):
        raise UserError(
            f"{option} {out} is a results folder (it holds runs, their index or calibration): pass {option} a "
            "folder of its own, e.g. a new folder beside it."
        )


def check_file(out: Path, option: str, replaceable: bool = False) -> None:
    """A UserError unless `out` may be written (or replaced: `replaceable`, when it is a file this
    very command wrote before, e.g. an earlier bundle)."""
    target = out.absolute()
    run = _inside_a_run(target.parent)
    if run is not None:
        raise UserError(
            f"{option} {out} is inside the run folder {run}: writing there would change the run's record; "
            f"pass {option} a path outside the results' run folders."
        )
    if target.name in files.RUN_FILES | RESULTS_FILES | files.COMPRESSED_TRACES and is_results_folder(target.parent):
        raise UserError(f"{option} {out} is one of the results folder's own files: pass another name.")
    if target.is_dir():
        raise UserError(
            f"{option} {out} is a folder: pass the path of the file to write, e.g. {option} artifact.tar.gz."
        )
    if target.exists() and not replaceable:
        raise UserError(
            f"{option} {out} exists and was not written by this command: pass a new path, or remove it first."
        )
