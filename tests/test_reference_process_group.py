"""An ncu pass that runs past its time: the whole profiled process group ends, not only ncu.

The stand-in `ncu` is a shell script that forks a sleeping child (as real ncu forks the agent
under --target-processes all) and waits; nothing it started may survive the timeout."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

from tbdkit.bench import reference
from tbdkit.spec import run_spec as specs


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie waiting for its reaper has finished running
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_an_ncu_timeout_ends_the_forked_agent_too(monkeypatch, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    ncu = tmp_path / "ncu"
    ncu.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nwait\n")
    ncu.chmod(ncu.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(reference, "agent_python", lambda: sys.executable)
    spec = specs.build(model="deepspeech2", batch_size=2, device="cpu")
    t0 = time.monotonic()
    rc = reference.run_agent([str(ncu)], spec, tmp_path, dict(os.environ), timeout_s=1.0)
    assert rc == 124
    assert time.monotonic() - t0 < 15
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not alive(child), f"the profiled child {child} outlived the ncu timeout"
    finally:
        if alive(child):
            os.kill(child, 9)
    assert "timed out after 1.0 s" in (tmp_path / "log.txt").read_text()


def test_the_profiled_agent_runs_through_the_native_launcher(monkeypatch, tmp_path: Path) -> None:
    """ncu is a command prefix of the native launcher: the agent's event lines are read as events
    (not copied into log.txt), its other output goes to the log, its exit code comes back."""
    ncu = tmp_path / "ncu"
    ncu.write_text('#!/bin/sh\necho "ncu: profiling" >&2\nexec "$@"\n')
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho \'@@tbdkit {"event": "phase", "phase": "profiled"}\'\n'
                      'echo "a library prints"\nexit 3\n')
    for exe in (ncu, python):
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(reference, "agent_python", lambda: str(python))
    spec = specs.build(model="deepspeech2", batch_size=2, device="cpu")
    assert reference.run_agent([str(ncu)], spec, tmp_path, dict(os.environ), timeout_s=30.0) == 3
    log = (tmp_path / "log.txt").read_text()
    assert "a library prints" in log and "ncu: profiling" in log and "@@tbdkit" not in log
    assert log.startswith(f"$ {ncu} {python} -u -m tbdkit.agent --spec ")
