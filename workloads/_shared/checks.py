"""What the data readers' checks share: which files a check decodes, and decoding one image whole.

`tbdkit data prepare` calls a workload's `check_source(source, hp, full=True)`, which decodes every
file once; the check before each run (`full=False`) decodes an even sample, so a damaged corpus
is named before training starts without reading all of it each time. Headers alone are not
enough: a truncated FLAC or JPEG has an intact header.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

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
