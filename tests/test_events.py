"""Progress events: an agent whose launcher died (its stdout a broken pipe) keeps running and ends
as it was told to, instead of failing on the next progress line."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_broken_pipe_stops_the_events_not_the_run() -> None:
    script = textwrap.dedent("""
        import os, sys
        from tbdkit.agent import events
        events.emit("phase", phase="first")       # the reader takes this one, then goes away
        sys.stdin.readline()                      # until the parent has closed the pipe's read end
        for i in range(3):
            events.emit("progress", iteration=i)  # broken pipe: swallowed, events switched off
        assert events.ENABLED is False
        print("after", file=sys.stderr)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith(events_prefix())
    proc.stdout.close()                           # the launcher dies: nobody reads stdout
    proc.stdin.write("go\n")
    proc.stdin.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert "broken pipe" in err and "after" in err and "Traceback" not in err


def events_prefix() -> str:
    from tbdkit.agent.events import PREFIX

    return PREFIX
