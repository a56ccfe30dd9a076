"""Where a command may write what a user asks for with -o: never into a run folder, never over a file
the kit wrote there, never into a results folder's own layout.

A run folder is complete or marked failed, and its spec.json is what `reproduce` re-runs: a report,
launch file or bundle written into it (or over one of its files) would make it say something else.
So `report -o`, `render -o` and `bundle -o` check their target here first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
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


def check_name(path: Path, option: str) -> None:
    """A UserError when the folder or file `path` a command would write holds a control character (a newline,
    an escape): every command line, listing and report that names it would break or mislead."""
    if not str(path).isprintable():
        raise UserError(
            f"{option} {str(path)!r} holds a control character (a newline, a tab, an escape): pass a name of "
            "printable characters."
        )


def check_folder(out: Path, option: str) -> None:
    """A UserError unless `out` is a folder the command may write its files into."""
    check_name(out, option)
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
    check_name(out, option)
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


@contextlib.contextmanager
def staged(out_dir: Path, what: str) -> Iterator[Path]:
    """A folder beside `out_dir` to write `what` ("The report") into; when the block ends, each of its files
    and folders is renamed into `out_dir` (renames on one file system need no space; a folder it replaces goes
    into the stage, to be removed with it). A disk that fills (or refuses) halfway leaves `out_dir` as it was,
    no `.tmp` file and no half folder, and the error is one sentence."""
    out_dir = Path(out_dir)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    except OSError as exc:
        raise UserError(
            f"{what} cannot be written to {out_dir} ({exc.strerror or exc}): pass -o a writable folder."
        ) from None
    try:
        yield stage
        out_dir.mkdir(exist_ok=True)
        for entry in sorted(stage.iterdir()):
            target = out_dir / entry.name
            if entry.is_dir() and target.is_dir():
                target.rename(stage / f".replaced-{entry.name}")
            entry.replace(target)
    except OSError as exc:
        raise UserError(
            f"{what} could not be written to {out_dir} ({exc.strerror or exc}); nothing of it was left there: "
            "free some space, or pass -o a folder on another disk."
        ) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
