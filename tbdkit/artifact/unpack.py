"""Reading a bundle without trusting it: the manifest first, then every member checked against it
before its bytes are read, streamed to disk, never more than the manifest's listed total.

The order of checks: the archive is gzip, and its decompressed stream is cut off past the limit
(tbdkit.artifact.layout) whatever the headers say; the first file is the manifest, of bounded size,
with the shape a reader relies on and a total within the limit, and room for it in the temporary
folder; then each member is a plain file (folders skipped, links, devices and sparse files refused)
under the prefix, listed in the manifest, once, with the listed size; its bytes are hashed as they
are copied to disk, a chunk at a time. Memory stays at one chunk whatever the bundle holds.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import tarfile
import tempfile
import weakref
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tbdkit.artifact.layout import (
    HOW,
    MANIFEST,
    MAX_DIRECTORIES,
    MAX_HEADER_READ,
    MAX_MANIFEST_BYTES,
    PREFIX,
    check_manifest,
    member_name,
)
from tbdkit.core.errors import UserError

CHUNK = 64 * 2**10  # a member's bytes are copied this much at a time; no read of the archive is larger
# Headers and padding the archive adds to its members: each member's 512-byte header (and a pax
# header for long names) and its last block's padding, generously.
PER_MEMBER_OVERHEAD = 8 * 512


class _TooBig(Exception):
    pass


class _Bounded:
    """The decompressed stream as tarfile reads it: a read larger than a header can be, or a position
    past `limit`, stops the reading (a bomb is cut off, not decompressed to its end)."""

    def __init__(self, raw: gzip.GzipFile, limit: int) -> None:
        self.raw, self.limit = raw, limit

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > max(MAX_HEADER_READ, CHUNK):  # a header of megabytes: a bomb
            raise _TooBig(f"a single read of {size} bytes")
        data = self.raw.read(size)
        if self.raw.tell() > self.limit:
            raise _TooBig(f"more than {self.limit:,} bytes unpacked")
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self.raw.tell() + offset if whence == 1 else None
        if target is None or target > self.limit:
            raise _TooBig(f"a seek past {self.limit:,} bytes")
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()


class Members(Mapping[str, bytes]):
    """A bundle's files (name below the prefix -> bytes), every one verified, kept on disk in a
    temporary folder that goes with this object; `path(name)` is where one lies."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="tbdkit-bundle-"))
        self._paths: dict[str, Path] = {}
        # removed with this object (or at exit), quietly: the files are the reader's until then
        self._remove = weakref.finalize(self, shutil.rmtree, self.folder, ignore_errors=True)

    def _new(self, name: str) -> Path:
        path = self.folder / f"{len(self._paths):06d}"
        self._paths[name] = path
        return path

    def path(self, name: str) -> Path:
        return self._paths[name]

    def __getitem__(self, name: str) -> bytes:
        return self._paths[name].read_bytes()

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def close(self) -> None:
        self._remove()


def read(path: Path) -> tuple[dict[str, Any], Members]:
    """A bundle's manifest and files, every member checked against it; UserError if anything is off."""
    try:
        raw = gzip.open(path, "rb")
    except OSError as exc:
        raise UserError(f"{path} is not a readable tar.gz ({exc}): pass {HOW}.") from None
    members = Members()
    try:
        with raw:
            # until the manifest is read: its own size and folder entries' headers, no more
            before = MAX_MANIFEST_BYTES + (MAX_DIRECTORIES + 2) * PER_MEMBER_OVERHEAD
            manifest = _read_into(path, _Bounded(raw, before), members)
    except _TooBig as exc:
        members.close()
        raise UserError(
            f"{path} unpacks to more than its manifest allows ({exc}): refusing to read further; pass {HOW}."
        ) from None
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error, RecursionError) as exc:
        members.close()
        raise UserError(f"{path} is a corrupt archive ({type(exc).__name__}: {str(exc)[:200]}): pass {HOW}.") from None
    except BaseException:
        members.close()
        raise
    return manifest, members


def _read_into(path: Path, stream: _Bounded, members: Members) -> dict[str, Any]:
    tar = tarfile.open(fileobj=stream, mode="r:")  # type: ignore[call-overload]
    manifest: dict[str, Any] | None = None
    listed: dict[str, Any] = {}
    folders = 0
    while True:
        member = tar.next()
        if member is None:
            break
        name = member_name(member.name)
        if member.isdir():
            folders += 1
            if folders > MAX_DIRECTORIES:
                raise UserError(f"{path} holds more than {MAX_DIRECTORIES:,} folder entries: pass {HOW}.")
            continue
        if not member.isfile() or member.issparse():
            raise UserError(
                f"The bundle member '{member.name[:200]}' is a link or device (or a sparse file), not a plain file: "
                f"refusing to read it; pass {HOW}."
            )
        if manifest is None:
            if name != MANIFEST:
                raise UserError(
                    f"{path} does not begin with its {PREFIX}/{MANIFEST} (its first file is "
                    f"'{member.name[:200]}'): it is not {HOW}."
                )
            if member.size > MAX_MANIFEST_BYTES:
                raise UserError(
                    f"{path}'s manifest is {member.size:,} bytes, over {MAX_MANIFEST_BYTES:,}: it is not {HOW}."
                )
            manifest = _manifest(path, tar, member)
            listed = dict(manifest["files"])
            total = sum(int(f["bytes"]) for f in listed.values())
            # the stream may hold the listed files, their headers and padding, and no more
            stream.limit = stream.tell() + total + PER_MEMBER_OVERHEAD * (len(listed) + 2) + tarfile.RECORDSIZE
            _check_room(members.folder, total)
            continue
        entry = listed.pop(name, None)
        if entry is None:
            why = "in the archive twice" if name in members else "not listed in its manifest"
            raise UserError(
                f"{path}: the member {name[:200]} is {why}: the bundle is damaged; make it again with `tbdkit bundle`."
            )
        if member.size != entry["bytes"]:
            raise UserError(
                f"{path}: {name[:200]} is {member.size:,} bytes and its manifest says {entry['bytes']:,}: the bundle "
                "is damaged or was changed; make it again with `tbdkit bundle`."
            )
        _copy(path, tar, member, name, entry["sha256"], members)
    if manifest is None:
        raise UserError(f"{path} has no readable {PREFIX}/{MANIFEST}: it is not {HOW}.")
    if listed:
        raise UserError(
            f"{path} does not match its manifest (missing: {sorted(listed)[:3]}): the bundle is damaged; make it "
            "again with `tbdkit bundle`."
        )
    return manifest


def _manifest(path: Path, tar: tarfile.TarFile, member: tarfile.TarInfo) -> dict[str, Any]:
    extracted = tar.extractfile(member)
    assert extracted is not None
    data = b"".join(iter(lambda: extracted.read(CHUNK), b""))
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise UserError(f"{path} has no readable {PREFIX}/{MANIFEST} (not JSON): it is not {HOW}.") from None
    return check_manifest(doc, str(path))


def _check_room(folder: Path, total: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < total + 16 * 2**20:
        raise UserError(
            f"Unpacking the bundle needs {total / 2**20:,.0f} MiB in {folder.parent} and {free / 2**20:,.0f} MiB are "
            "free: free some space, or point TMPDIR at a folder with room."
        )


def _copy(path: Path, tar: tarfile.TarFile, member: tarfile.TarInfo, name: str, sha: str, members: Members) -> None:
    extracted = tar.extractfile(member)
    assert extracted is not None
    digest = hashlib.sha256()
    with open(members._new(name), "wb") as out:
        for chunk in iter(lambda: extracted.read(CHUNK), b""):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != sha:
        raise UserError(
            f"{path}: {name[:200]} does not match its sha256 in the manifest: the bundle is damaged or was changed; "
            "make it again with `tbdkit bundle`."
        )


def is_bundle(path: Path) -> bool:
    """Whether `path` is a file `tbdkit bundle` wrote: a gzip whose first tar member is the manifest."""
    try:
        with gzip.open(path, "rb") as raw:
            header = raw.read(512)
    except (OSError, EOFError, zlib.error):
        return False
    return len(header) == 512 and header[:100].rstrip(b"\0") == f"{PREFIX}/{MANIFEST}".encode()
