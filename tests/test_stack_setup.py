"""A stack install that fails says why in the error itself, after pip had a second try."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tbdkit.env import stacks
from tbdkit.core.errors import UserError


def test_failed_install_retries_pip_once_and_shows_the_log_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path / "venvs"))
    # Plenty of room, whatever this machine's disk holds: the disk check has its own test below.
    monkeypatch.setattr(stacks.shutil, "disk_usage", lambda _: shutil_usage(free=int(1e12)))
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], stdout=None, **_: object) -> subprocess.CompletedProcess:
        calls.append(cmd)
        if "pip" in cmd:
            stdout.write("ERROR: No matching distribution found for torch==2.14.1\n")
            stdout.flush()
            return subprocess.CompletedProcess(cmd, 1)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(stacks.subprocess, "run", fake_run)
    with pytest.raises(UserError) as err:
        stacks.setup("pytorch", how="pip")
    message = str(err.value)
    assert sum("pip" in c for c in calls) == 2
    assert "tbdkit setup pytorch" in message
    assert "No matching distribution found for torch==2.14.1" in message.split("Its last lines:")[1]
    assert not stacks.is_installed("pytorch")


def test_log_tail_keeps_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(40)))
    tail = stacks.log_tail(log, lines=3).splitlines()
    assert [t.strip() for t in tail] == ["line 37", "line 38", "line 39"]
    assert "could not be read" in stacks.log_tail(tmp_path / "missing.log")


def test_an_install_that_cannot_fit_is_refused_before_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path / "venvs"))
    monkeypatch.setattr(stacks.shutil, "disk_usage", lambda _: shutil_usage(free=int(2e9)))
    ran: list[list[str]] = []
    monkeypatch.setattr(stacks.subprocess, "run", lambda cmd, **_: ran.append(cmd))
    with pytest.raises(UserError, match=r"PyTorch stack needs about 6\.7 GB free .* has 2\.0 GB.*TBDKIT_VENVS"):
        stacks.setup("pytorch")
    assert ran == []


def shutil_usage(free: int) -> object:
    import shutil

    return shutil._ntuple_diskusage(total=free * 10, used=free * 9, free=free)
