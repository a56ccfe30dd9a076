"""What a bundle is, for its writer and its reader alike: the prefix of its members, its format, the
manifest's shape (a pydantic model), and the limits a reader holds it to before unpacking anything.

A bundle (tbdkit.artifact.bundle) is a tar.gz whose first member is `tbdkit-artifact/manifest.json`;
every other member is listed there with its sha256 and size. The limits below are far above what
a results folder needs (a sweep of a thousand runs is a few GiB at most) and far below what would
exhaust a reviewer's machine.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tbdkit.core.errors import UserError

PREFIX = "tbdkit-artifact"
FORMAT = "tbdkit-artifact/1"
MANIFEST = "manifest.json"
HOW = "a tbdkit artifact made by `tbdkit bundle`"

MAX_UNPACKED_BYTES = 4 * 2**30  # every member together, unpacked
MAX_MEMBERS = 50_000  # files listed in the manifest
MAX_MANIFEST_BYTES = 32 * 2**20
MAX_DIRECTORIES = 10_000  # folder entries (a bundle packed again by `tar` has them)
MAX_HEADER_READ = 64 * 2**10  # one read of an archive header (a long name, a pax header)
# Traces travel compressed above this size, and are left out when still above LEAVE_OUT_ABOVE compressed.
COMPRESS_ABOVE = 8 * 2**20
LEAVE_OUT_ABOVE = 64 * 2**20


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=0, le=MAX_UNPACKED_BYTES)


class Compressed(BaseModel):
    """A member that travels gzip-compressed: the file it holds, and that file's size and sha256."""

    model_config = ConfigDict(extra="allow", strict=True)

    of: str
    method: Literal["gzip"]
    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Manifest(BaseModel):
    """The manifest's fields a reader relies on, each of its type; others are kept as they are."""

    model_config = ConfigDict(extra="allow", strict=True)

    format: Literal["tbdkit-artifact/1"]
    kit_version: str | None = None
    created_utc: str | None = None
    runs: list[str] = Field(default_factory=list)
    sweeps: list[str] = Field(default_factory=list)
    report: dict[str, Any] = Field(default_factory=dict)
    missing: list[dict[str, Any]] = Field(default_factory=list)
    excluded: list[dict[str, Any]] = Field(default_factory=list)
    broken_runs: list[dict[str, Any]] = Field(default_factory=list)
    locks: dict[str, dict[str, Any]] = Field(default_factory=dict)
    compressed: dict[str, Compressed] = Field(default_factory=dict)
    files: dict[str, FileEntry] = Field(max_length=MAX_MEMBERS)


def check_manifest(doc: Any, where: str) -> dict[str, Any]:
    """The manifest as a dict once it has the shape a reader relies on; a UserError otherwise."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        said = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise UserError(f"{where} is not a {FORMAT} bundle (its manifest says {str(said)[:80]!r}): pass {HOW}.")
    try:
        manifest = Manifest.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])[:120]
        raise UserError(
            f"{where} is not a tbdkit bundle: its manifest's {field or 'top'} is malformed ({err['msg']}): pass {HOW}."
        ) from None
    total = sum(f.bytes for f in manifest.files.values())
    if total > MAX_UNPACKED_BYTES:
        raise UserError(
            f"{where} lists {total / 2**30:,.1f} GiB of files, over the {MAX_UNPACKED_BYTES / 2**30:.0f} GiB a "
            "bundle may unpack to: refusing to read it; bundle fewer runs at a time."
        )
    for name in manifest.files:
        member_name(f"{PREFIX}/{name}")
    return doc


def member_name(name: str) -> str:
    """The member's path below the prefix, or a UserError if it could land outside it."""
    path = PurePosixPath(name)
    if (
        path.is_absolute()
        or ".." in path.parts
        or not path.parts
        or path.parts[0] != PREFIX
        or "\\" in name
        or "\0" in name
    ):
        raise UserError(
            f"The bundle holds an unsafe or foreign member path '{name[:200]}': refusing to read it "
            f"(a tbdkit bundle holds only paths under {PREFIX}/; make one with `tbdkit bundle`)."
        )
    return "/".join(path.parts[1:])
