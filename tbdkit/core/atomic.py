"""Writing a file whole or not at all: a temporary file beside it, flushed to disk, renamed over it.

The one atomic writer of the kit: every module that writes a file whole (run files, the report, lock
files, a stack's record) goes through it, so a reader never sees half a file and a crash leaves the old
one. A new file gets the mode `open(path, "w")` would give it (0666 less the umask); a replaced file
keeps its mode.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _umask() -> int:
    """The process's umask, read without changing it (os.umask can only be read by setting it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A new, empty temporary file beside `path` (its folder made if missing) for a writer that streams
    (a tar archive, a database): renamed over `path` when the block ends, removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def unfinished(folder: Path) -> dict[Path, str]:
    """The temporary files of writes in `folder` (not its subfolders) that never finished, each with the name
    of the file it was to become: what a writer killed mid-write (SIGKILL, the OOM killer) leaves. Only for a
    folder whose writers are known to be dead: a live writer's file looks the same."""
    try:
        found = [p for p in Path(folder).glob(".*.tmp") if p.is_file()]
    except OSError:
        return {}
    return {p: p.name[1:].rsplit(".", 2)[0] for p in sorted(found)}  # ".NAME.<mkstemp's 8>.tmp"


def write_bytes(path: Path, data: bytes) -> None:
    """`data` at `path` whole, flushed to disk, or the old file untouched and the error raised."""
    with replacing(path) as tmp, tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_text(path: Path, text: str, encoding: str | None = None) -> None:
    """`text` at `path` whole, in `encoding` (the locale's, as `Path.write_text`, when not given)."""
    write_bytes(path, text.encode(encoding or _locale_encoding()))


def _locale_encoding() -> str:
    import locale

    return locale.getpreferredencoding(False)
