"""What the data readers' checks share: which files a check decodes, and decoding one image whole.

`tbdkit data prepare` calls a workload's `check_source(source, hp, full=True)`, which decodes every
file once; the check before each run (`full=False`) decodes an even sample, so a damaged corpus
is named before training starts without reading all of it each time. Headers alone are not
enough: a truncated FLAC or JPEG has an intact header.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from _shared.errors import DataError

T = TypeVar("T")

MAX_DEPTH = 32  # folders below a dataset's root: LibriSpeech needs 3 (split/speaker/chapter)
KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device", stat.S_IFSOCK: "a socket",
         stat.S_IFDIR: "a folder"}

SAMPLE = 16  # files the check before a run decodes: the first, the last and an even spread between


def chosen(items: Sequence[T], full: bool, sample: int = SAMPLE) -> list[T]:
    """Every item when `full`, else up to `sample` items spread evenly (first and last included)."""
    if full or len(items) <= sample:
        return list(items)
    step = (len(items) - 1) / (sample - 1)
    return [items[round(i * step)] for i in range(sample)]


def how_checked(checked: int, total: int, what: str, verb: tuple[str, str] = ("decoded", "decodes")) -> str:
    """The words a check's description ends with: what it decoded (or, by `verb`, replayed)."""
    if checked >= total:
        return f"all {total} {what} {verb[0]}"
    return f"{checked} of {total} {what} {verb[0]} (`tbdkit data prepare` {verb[1]} them all)"


def image_errors(image_module: Any) -> tuple[type[BaseException], ...]:
    """What Pillow raises for a damaged image: OSError (truncated, unidentified), SyntaxError and
    ValueError (broken chunks), EOFError, and its DecompressionBombError (not an OSError)."""
    return OSError, SyntaxError, ValueError, EOFError, image_module.DecompressionBombError


def image_problem(image_module: Any, path: Path) -> str | None:
    """Why Pillow cannot decode the image at `path` completely (None when it can)."""
    try:
        with image_module.open(path) as img:
            img.load()  # decodes every pixel: a truncated file fails here, not at open()
    except image_errors(image_module) as e:
        return str(e) or type(e).__name__
    return None


def exclude_hint(path: Path, root: Path) -> str:
    """How to leave one damaged file out of a folder-of-files dataset."""
    return f"move {path.name} out of {root} (or replace it with an intact copy) and check again"


def first_undecodable(path: Path, limit: int | None = None, chunk_bytes: int = 1 << 24) -> tuple[int, str] | None:
    """(line number, reason) of the first bytes of `path` that are not UTF-8, reading the whole file
    in chunks or its first `limit` bytes; None when they all decode."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    lines_before, read = 0, 0
    with path.open("rb") as f:
        while limit is None or read < limit:
            chunk = f.read(chunk_bytes if limit is None else min(chunk_bytes, limit - read))
            try:
                decoder.decode(chunk, final=not chunk and limit is None)
            except UnicodeDecodeError as e:
                bad = bytes(e.object[e.start:e.start + 1]).hex() or "end of file"
                return (lines_before + chunk[: max(e.start, 0)].count(b"\n") + 1,
                        f"byte 0x{bad} near offset {read + e.start}: {e.reason}")
            if not chunk:
                break
            lines_before += chunk.count(b"\n")
            read += len(chunk)
    return None


def utf8_problem(path: Path, limit: int | None = None) -> str | None:
    """One sentence naming the first line of `path` that is not UTF-8 and the fix (None if all is)."""
    bad = first_undecodable(path, limit)
    if bad is None:
        return None
    return (f"{path} line {bad[0]} is not UTF-8 ({bad[1]}): re-encode it as UTF-8 "
            f"(e.g. iconv -f LATIN1 -t UTF-8 {path.name}) or fix that line")


def _shown(path: str, limit: int = 160) -> str:
    return path if len(path) <= limit else f"{path[:limit - 3]}..."


def regular_files(root: Path, pattern: str, max_depth: int = MAX_DEPTH) -> list[Path]:
    """The files below `root` whose names match `pattern` (as Path.rglob has them), sorted: walked
    without recursion, links to folders not followed, at most `max_depth` folders deep. A match that is
    not a regular file (a FIFO, whose read waits for a writer forever; a device; a socket) or a deeper
    tree is a DataError, one sentence with the fix."""
    found: list[Path] = []
    stack = [(str(root), 0)]
    while stack:
        folder, depth = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if depth >= max_depth:
                        raise DataError(
                            f"{root} has folders nested more than {max_depth} deep ({_shown(entry.path)}): a "
                            "dataset's files sit a few folders below its root; pass the dataset's own folder"
                        )
                    stack.append((entry.path, depth + 1))
                elif fnmatch.fnmatchcase(entry.name, pattern):
                    if not entry.is_file():  # a link to a regular file is one
                        raise DataError(f"{_shown(entry.path)} is {_kind(entry)}, not a regular file: replace it "
                                        f"with the file itself or move it out of {root}")
                    found.append(Path(entry.path))
    return sorted(found)


def _kind(entry: os.DirEntry[str]) -> str:
    try:
        return KINDS.get(stat.S_IFMT(entry.stat().st_mode), "not a file")
    except OSError:
        return "a broken link"


def read_json(path: Path) -> Any:
    """The JSON document at `path`, a regular file; a DataError for anything else, for a document that
    does not parse, and for one nested deeper than Python's JSON reader follows (RecursionError)."""
    if not path.is_file():
        raise DataError(f"{path} is not a regular file: put the dataset's original file there")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"cannot parse {path} ({e}): replace it with the dataset's original file") from e
    except RecursionError:
        raise DataError(f"{path} nests its arrays or objects deeper than a JSON reader follows: replace it "
                        "with the dataset's original file") from None
