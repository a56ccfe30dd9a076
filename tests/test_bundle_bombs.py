"""Bundle bombs and malformed manifests: `artifact.read()` checks the manifest first and every member's
name and size against it before reading its bytes, streams them to disk, and caps what the archive
may unpack to, so a few hundred KiB of gzip cannot take a reviewer's memory; a manifest of the wrong
shape is "not a tbdkit bundle", never a RecursionError, TypeError or AttributeError."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
import tracemalloc
from pathlib import Path

import pytest

from tbdkit.artifact import bundle as artifact
from tbdkit.artifact import layout
from tbdkit.core.errors import UserError

BOMB = 128 * 2**20  # each bomb unpacks to this much; the gzip holds a few hundred KiB
BUDGET = 16 * 2**20  # the most Python memory reading one may take


class Zeros(io.RawIOBase):
    """`size` zero bytes, made as they are read (a bomb is built without holding it)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        n = min(len(buf), self.left)
        buf[:n] = bytes(n)
        self.left -= n
        return n


def _manifest(files: dict[str, dict]) -> bytes:
    return json.dumps({"format": layout.FORMAT, "kit_version": "0", "files": files}).encode()


def _entry(data: bytes) -> dict:
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, io.RawIOBase | bytes]]) -> Path:
    with tarfile.open(path, "w:gz", compresslevel=1, format=tarfile.USTAR_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if isinstance(data, bytes) else data)
    return path


def _member(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name if name.startswith(("/", ".")) or "@" in name else f"{layout.PREFIX}/{name}")
    info.size, info.type = size, kind
    return info


def _manifest_member(doc: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return _member(layout.MANIFEST, len(doc)), doc


def bombs(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Each bomb and the words its refusal says."""
    small = b"iteration,seconds\n"
    listed = _manifest({"results/r/iterations.csv": _entry(small)})
    return {
        # a member whose header says 128 MiB where the manifest lists 18 bytes
        "bigger than listed": (_archive(tmp / "a.tgz", [_manifest_member(listed),
                                                       (_member("results/r/iterations.csv", BOMB), Zeros(BOMB))]),
                               "manifest says 18"),
        # a member the manifest does not list at all
        "unlisted": (_archive(tmp / "b.tgz", [_manifest_member(_manifest({})),
                                              (_member("results/r/big.csv", BOMB), Zeros(BOMB))]),
                     "not listed in its manifest"),
        # 128 MiB before the manifest
        "before the manifest": (_archive(tmp / "c.tgz", [(_member("results/r/big.csv", BOMB), Zeros(BOMB)),
                                                        _manifest_member(listed)]),
                                "does not begin with its"),
        # a manifest of 128 MiB
        "a huge manifest": (_archive(tmp / "d.tgz", [(_member(layout.MANIFEST, BOMB), Zeros(BOMB))]),
                            "over 33,554,432"),
        # a pax header of 128 MiB (a long name or comment), which tarfile reads whole into memory
        "a huge pax header": (_archive(tmp / "e.tgz", [(_member("././@PaxHeader", BOMB, tarfile.XHDTYPE), Zeros(BOMB)),
                                                      _manifest_member(listed)]),
                              "unpacks to more than its manifest allows"),
        # a GNU long name of 128 MiB
        "a huge long name": (_archive(tmp / "f.tgz", [(_member("././@LongLink", BOMB, tarfile.GNUTYPE_LONGNAME),
                                                       Zeros(BOMB)), _manifest_member(listed)]),
                             "unpacks to more than its manifest allows"),
    }


@pytest.fixture(scope="module")
def made_bombs(tmp_path_factory):
    return bombs(tmp_path_factory.mktemp("bombs"))


@pytest.mark.parametrize("name", ["bigger than listed", "unlisted", "before the manifest", "a huge manifest",
                                  "a huge pax header", "a huge long name"])
def test_a_bomb_is_refused_within_a_small_memory_budget(made_bombs, name, tmp_path, monkeypatch):
    path, words = made_bombs[name]
    assert path.stat().st_size < 2**20  # a few hundred KiB of gzip
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a reader spools members
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match=words):
            artifact.read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < BUDGET, f"{name}: reading took {peak / 2**20:.1f} MiB"
    assert list(tmp_path.iterdir()) == []  # nothing left of the refused bundle


def test_a_manifest_listing_more_than_the_cap_is_refused_before_any_member(tmp_path):
    data = b"x"
    files = {"results/r/iterations.csv": {"sha256": hashlib.sha256(data).hexdigest(), "bytes": 2**31},
             "results/r/samples.csv": {"sha256": hashlib.sha256(data).hexdigest(), "bytes": 2**31 + 1}}
    path = _archive(tmp_path / "lies.tgz", [_manifest_member(_manifest(files)),
                                            (_member("results/r/iterations.csv", 1), data)])
    with pytest.raises(UserError, match="over the 4 GiB a bundle may unpack to"):
        artifact.read(path)


def test_many_folder_entries_are_refused(tmp_path):
    folders = [(_member(f"d{i}", 0, tarfile.DIRTYPE), b"") for i in range(layout.MAX_DIRECTORIES + 1)]
    with pytest.raises(UserError, match="more than 10,000 folder entries"):
        artifact.read(_archive(tmp_path / "dirs.tgz", folders))


def test_a_member_twice_or_missing_is_refused(tmp_path):
    data = b"a,b\n"
    manifest = _manifest({"results/r/iterations.csv": _entry(data), "results/r/samples.csv": _entry(data)})
    twice = [_manifest_member(manifest), *[(_member("results/r/iterations.csv", len(data)), data)] * 2]
    with pytest.raises(UserError, match="in the archive twice"):
        artifact.read(_archive(tmp_path / "twice.tgz", twice))
    with pytest.raises(UserError, match=r"missing: \['results/r/samples.csv'\]"):
        artifact.read(_archive(tmp_path / "missing.tgz", twice[:2]))


def test_members_are_read_from_disk_not_memory(tmp_path):
    """A sound bundle's files wait on disk; each is read when asked for."""
    results = tmp_path / "results"
    run = results / "r1"
    run.mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps({"model": "resnet50", "framework": "pytorch", "batch_size": 2}))
    (run / "summary.json").write_text(json.dumps({"run_id": "r1", "status": "ok"}))
    (run / "iterations.csv").write_bytes(b"iteration,seconds\n" + b"1,0.5\n" * 2_000_000)  # 12 MiB
    artifact.bundle(results, tmp_path / "a.tgz")
    tracemalloc.start()
    try:
        manifest, files = artifact.read(tmp_path / "a.tgz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB"
    assert files["results/r1/iterations.csv"] == (run / "iterations.csv").read_bytes()
    assert files.path("results/r1/iterations.csv").stat().st_size == manifest["files"]["results/r1/iterations.csv"]["bytes"]


# ---------------------------------------------------------------- malformed manifests

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("text, words", [
    (DEEP, "not JSON"),
    ('{"format": "tbdkit-artifact/1", "files": ' + DEEP + "}", "not JSON"),
    ("[1, 2]", "is not a tbdkit-artifact/1 bundle"),
    ("null", "is not a tbdkit-artifact/1 bundle"),
    ('"tbdkit-artifact/1"', "is not a tbdkit-artifact/1 bundle"),
    ('{"format": "tbdkit-artifact/1"}', "manifest's files is malformed"),
    ('{"format": "tbdkit-artifact/1", "files": [1]}', "manifest's files is malformed"),
    ('{"format": "tbdkit-artifact/1", "files": null}', "manifest's files is malformed"),
    ('{"format": "tbdkit-artifact/1", "files": "x"}', "manifest's files is malformed"),
    ('{"format": "tbdkit-artifact/1", "files": {"a": null}}', "manifest's files.a is malformed"),
    ('{"format": "tbdkit-artifact/1", "files": {"a": {"sha256": 1, "bytes": 1}}}', "files.a.sha256 is malformed"),
    ('{"format": "tbdkit-artifact/1", "files": {"a": {"sha256": "' + "0" * 64 + '", "bytes": -1}}}', "files.a.bytes"),
    ('{"format": "tbdkit-artifact/1", "files": {"a": {"sha256": "' + "0" * 64 + '", "bytes": "1"}}}', "files.a.bytes"),
    ('{"format": "tbdkit-artifact/1", "files": {"../x": {"sha256": "' + "0" * 64 + '", "bytes": 1}}}', "unsafe"),
    ('{"format": "tbdkit-artifact/1", "files": {}, "runs": "r1"}', "manifest's runs is malformed"),
    ('{"format": "tbdkit-artifact/1", "files": {}, "kit_version": [1]}', "manifest's kit_version is malformed"),
    ('{"format": "tbdkit-artifact/1", "files": {}, "locks": [1]}', "manifest's locks is malformed"),
    ('{"format": "tbdkit-artifact/1", "files": {}, "compressed": {"x.gz": 1}}', "compressed.x.gz is malformed"),
])
def test_a_malformed_manifest_is_not_a_tbdkit_bundle(tmp_path, text, words):
    doc = text.encode()
    path = _archive(tmp_path / "m.tgz", [_manifest_member(doc)])
    with pytest.raises(UserError, match=words.replace("[", r"\[").replace(".", r"\.")) as err:
        artifact.read(path)
    assert "tbdkit" in str(err.value)


def test_a_malformed_manifest_through_reproduce_is_one_sentence(tmp_path):
    from model_checks import cli

    path = _archive(tmp_path / "m.tgz", [_manifest_member(b'{"format": "tbdkit-artifact/1", "files": [1]}')])
    proc = cli("reproduce", str(path), "-r", str(tmp_path / "again"), "--yes")
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr
    assert not (tmp_path / "again").exists()
