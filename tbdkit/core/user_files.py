"""Reading a file a user hands the kit (an outside folder's workload.toml, a prices.toml): only a regular
file, and nested no deeper than its reader can follow.

A FIFO's read waits for a writer forever and a device's may never end, so anything but a regular file is
one sentence. A document nested a thousand levels deep (`x = [[[[...]]]]`) makes Python's TOML reader
recurse until RecursionError; that is one sentence too, not a traceback.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

try:
    import tomllib  # novermin
except ModuleNotFoundError:  # Python 3.10 (the MXNet image): tomli is the same parser
    import tomli as tomllib  # type: ignore[no-redef]

from tbdkit.core.errors import UserError

KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device", stat.S_IFSOCK: "a socket"}


def read_bytes(path: Path) -> bytes:
    """The bytes of the regular file at `path` (a link to one is fine); a UserError for a folder, FIFO,
    device or socket. The file is opened without waiting (a FIFO opens at once) and checked as opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else KINDS.get(stat.S_IFMT(mode), "not a file")
            raise UserError(f"{path} is {kind}, not a regular file: put the file itself there.")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def load_toml(path: Path) -> dict[str, Any]:
    """`path`, a regular file of UTF-8 TOML; UnicodeDecodeError and tomllib.TOMLDecodeError are the caller's
    to word, a nesting too deep to read is a UserError."""
    text = read_bytes(path).decode("utf-8")
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise UserError(
            f"{path} nests arrays or tables deeper than a TOML reader can follow: write it with a few levels "
            "of nesting, as the kit's own files are."
        ) from None
