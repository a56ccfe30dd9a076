"""Fuzz: bundles of random shapes. The manifest replaced by any JSON (or nested past the stack), one of
its fields replaced, members of other sizes than listed, missing, doubled or added under odd names,
the archive cut short: `artifact.read()` either reads a bundle whose every member matches its
manifest or raises one UserError; what it reads, `reproduce`'s readers take without raising, and
`tbdkit reproduce` answers without a traceback. 25 examples each by default; TBDKIT_FUZZ_EXAMPLES=500
searches harder."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from report_fixtures import make_run
from test_fuzz_run_files import _mutated as _set  # `doc` with one (possibly new) key path replaced
from test_fuzz_run_files import json_values
from tbdkit.cli import app  # before tbdkit.bench (which imports the CLI's console)
from tbdkit.artifact import bundle as artifact
from tbdkit.artifact import layout
from tbdkit.bench import run_list
from tbdkit.core.errors import UserError

EXAMPLES = int(os.environ.get("TBDKIT_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

names = st.one_of(st.text(min_size=1, max_size=40), st.sampled_from(
    ["results/r/summary.json", "../x", "/etc/passwd", "results/../../x", "a\\b", "results/r/\0x", "", ".", "results/"]))


@pytest.fixture(scope="module")
def sound(tmp_path_factory) -> tuple[dict, dict[str, bytes]]:
    """A sound bundle's manifest and members (name below the prefix -> bytes)."""
    tmp = tmp_path_factory.mktemp("sound")
    make_run(tmp / "results", "resnet50", "pytorch", 2, 10.0)
    make_run(tmp / "results", "resnet50", "pytorch", 4, 18.0, started="2026-11-22T10:00:01")
    artifact.bundle(tmp / "results", tmp / "a.tgz")
    manifest, files = artifact.read(tmp / "a.tgz")
    return manifest, dict(files.items())


def _write(path: Path, members: list[tuple[str, bytes]], sizes: dict[str, int] | None = None) -> Path:
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _members(manifest: object, files: dict[str, bytes]) -> list[tuple[str, bytes]]:
    head = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    return [(f"{layout.PREFIX}/{layout.MANIFEST}", head), *((f"{layout.PREFIX}/{n}", d) for n, d in files.items())]


def _read(path: Path) -> None:
    """read() gives a consistent bundle or a UserError; what it gives, the readers take."""
    try:
        manifest, files = artifact.read(path)
    except UserError:
        return
    assert isinstance(manifest, dict) and set(files) == set(manifest["files"])
    for name in files:
        assert hashlib.sha256(files[name]).hexdigest() == manifest["files"][name]["sha256"]
    recorded = artifact.recorded_runs(files)
    artifact.lock_mismatches(files, [str(s.get("run_id")) for _, s in recorded])
    artifact.contents(files)
    files.close()


@FUZZ
@given(value=json_values, depth=st.integers(0, 200_000))
def test_any_manifest_is_read_or_refused(sound, tmp_path, value, depth):
    _, files = sound
    _read(_write(tmp_path / "a.tgz", _members(value, files)))
    _read(_write(tmp_path / "b.tgz", _members(("[" * depth + "]" * depth).encode() or b"[]", files)))


@FUZZ
@given(field=st.sampled_from([["format"], ["files"], ["runs"], ["sweeps"], ["report"], ["locks"], ["excluded"],
                              ["compressed"], ["kit_version"], ["missing"], ["broken_runs"], ["placeholders"]]),
       value=json_values, member=st.integers(0, 100), part=st.sampled_from([None, "sha256", "bytes", "extra"]))
def test_any_field_of_the_manifest_replaced(sound, tmp_path, field, value, member, part):
    manifest, files = sound
    _read(_write(tmp_path / "a.tgz", _members(_set(manifest, field, value), files)))
    name = sorted(manifest["files"])[member % len(manifest["files"])]
    path = ["files", name] + ([part] if part else [])
    _read(_write(tmp_path / "b.tgz", _members(_set(manifest, path, value), files)))


@FUZZ
@given(member=st.integers(0, 100), data=st.binary(max_size=5000), listed=st.booleans(),
       size=st.integers(-5, 2**40), action=st.sampled_from(["replace", "drop", "double", "add", "cut"]),
       name=names, cut=st.integers(0, 4000))
def test_members_of_any_size_and_name(sound, tmp_path, member, data, listed, size, action, name, cut):
    manifest, files = sound
    manifest, files = json.loads(json.dumps(manifest)), dict(files)
    target = sorted(files)[member % len(files)]
    if action == "replace":
        files[target] = data
    elif action == "drop":
        files.pop(target)
    elif action == "add":
        files[name] = data
    if listed:  # the manifest agrees with the new member, with its real size or another
        manifest["files"][name if action == "add" else target] = {"sha256": hashlib.sha256(data).hexdigest(),
                                                                 "bytes": size if size >= 0 else len(data)}
    members = _members(manifest, files)
    if action == "double":
        members.append(members[-1])
    path = _write(tmp_path / "a.tgz", members)
    if action == "cut":
        path.write_bytes(path.read_bytes()[:cut])
    _read(path)


@FUZZ
@given(value=json_values, field=st.sampled_from([["files"], ["runs"], ["kit_version"], ["compressed"]]))
def test_reproduce_answers_any_manifest_without_a_traceback(sound, tmp_path, monkeypatch, value, field):
    manifest, files = sound
    monkeypatch.setattr(run_list, "run_all", lambda specs, results, unit, quiet_stdout=False: [
        {"run_id": "new", "status": "ok", "metrics": {}} for _ in specs])
    path = _write(tmp_path / "a.tgz", _members(_set(manifest, field, value), files))
    result = CliRunner().invoke(app, ["reproduce", str(path), "-r", str(tmp_path / "again"), "--yes"])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError("".join(traceback.format_exception(result.exception)) + result.output)
    assert "Traceback" not in result.output
