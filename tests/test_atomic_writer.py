"""One atomic writer (tbdkit.core.atomic): a file lands whole or the old one stays, and no module of the
kit renames a temporary file of its own."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from tbdkit.core import atomic

KIT = Path(__file__).resolve().parents[1] / "tbdkit"

# renames that are not a file written whole: a staged report folder moved into place entry by entry
# Folder moves, not file writes: a staged output folder's entries renamed into place (report, render), an
# adopted stack's folder swapped in beside the old one; and the free-space probe's scratch file.
ALLOWED = {
    ("results/outputs.py", "rename"),
    ("results/outputs.py", "replace"),
    ("env/adopt.py", "replace"),
    ("results/space.py", "mkstemp"),
}


def test_a_file_lands_whole_or_the_old_one_stays(tmp_path, monkeypatch):
    path = tmp_path / "deep" / "summary.json"
    atomic.write_text(path, "first")
    assert path.read_text() == "first"
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()  # as open(path, "w") would make it
    path.chmod(0o640)
    atomic.write_text(path, "second")
    assert path.read_text() == "second" and stat.S_IMODE(path.stat().st_mode) == 0o640  # a replaced file keeps its mode

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        atomic.write_text(path, "third")
    assert path.read_text() == "second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["summary.json"]  # no temporary file left


def test_a_streamed_writer_replaces_on_success_only(tmp_path):
    out = tmp_path / "a.bin"
    with atomic.replacing(out) as tmp:
        tmp.write_bytes(b"x")
    assert out.read_bytes() == b"x"
    with pytest.raises(RuntimeError), atomic.replacing(out) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("stopped")
    assert out.read_bytes() == b"x" and sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _renames(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, node.func.value
        module = owner.id if isinstance(owner, ast.Name) else None
        if module in {"os", "shutil", "tempfile"} and name in {"replace", "rename", "move", "mkstemp"}:
            found.append((node.lineno, name))
        elif name in {"replace", "rename"} and len(node.args) == 1 and not node.keywords:  # Path.replace(target)
            found.append((node.lineno, name))
    return found


def test_no_module_renames_a_file_of_its_own():
    hand_rolled = [
        f"{path.relative_to(KIT)}:{line} ({name})"
        for path in sorted(KIT.rglob("*.py"))
        if path.relative_to(KIT).as_posix() != "core/atomic.py"
        for line, name in _renames(ast.parse(path.read_text()))
        if (path.relative_to(KIT).as_posix(), name) not in ALLOWED
    ]
    assert hand_rolled == [], "write through tbdkit.core.atomic instead: " + ", ".join(hand_rolled)
