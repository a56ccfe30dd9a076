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


def test_the_launcher_reads_what_the_agent_emits(capsys) -> None:
    """The two sides of the process boundary import nothing of each other, only the line format (tbdkit.events)."""
    from tbdkit.agent import events
    from tbdkit.launch.base import EVENT_PREFIX, parse_event

    assert EVENT_PREFIX == events.PREFIX
    events.emit("phase", phase="measuring", cap_s=2.5)
    line = capsys.readouterr().out
    assert parse_event(line) == {"event": "phase", "phase": "measuring", "cap_s": 2.5}
    assert parse_event("a library's own print\n") is None
    assert parse_event(EVENT_PREFIX + "{broken\n") is None
    assert parse_event(EVENT_PREFIX + "[1, 2]\n") is None  # not an event: it goes to the log


def test_no_launcher_imports_the_agent() -> None:
    """launch -> agent is a process boundary: `python -m tbdkit.agent`, never an import."""
    import ast
    from pathlib import Path

    import tbdkit.launch

    for path in Path(tbdkit.launch.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                     if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n == "tbdkit.agent" or n.startswith("tbdkit.agent.")], path
