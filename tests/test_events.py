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
    """The two sides of the process boundary import nothing of each other, only the line format (tbdkit.core.events)."""
    from tbdkit.agent import events
    from tbdkit.launch.base import EVENT_PREFIX, parse_event

    assert EVENT_PREFIX == events.PREFIX
    events.emit("phase", phase="measuring", cap_s=2.5)
    line = capsys.readouterr().out
    assert parse_event(line) == {"event": "phase", "phase": "measuring", "cap_s": 2.5}
    assert parse_event("a library's own print\n") is None
    assert parse_event(EVENT_PREFIX + "{broken\n") is None
    assert parse_event(EVENT_PREFIX + "[1, 2]\n") is None  # not an event: it goes to the log


def agent_imports(source: str, package: str = "tbdkit.launch") -> list[str]:
    """The modules of tbdkit.agent that `source` (a module of `package`) imports, relative imports resolved."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found += [n for n in names if n == "tbdkit.agent" or n.startswith("tbdkit.agent.")]
    return found


def test_the_import_walk_sees_every_form() -> None:
    for source in ("import tbdkit.agent.run", "from tbdkit import agent", "from tbdkit.agent.events import PREFIX",
                   "def f():\n    from ..agent import events", "from .. import agent"):
        assert agent_imports(source), source
    assert agent_imports("from tbdkit.launch import base\nimport tbdkit.agents_like") == []


def test_no_launcher_imports_the_agent() -> None:
    """launch -> agent is a process boundary: `python -m tbdkit.agent`, never an import."""
    from pathlib import Path

    import tbdkit.launch

    for path in Path(tbdkit.launch.__file__).parent.glob("*.py"):
        assert agent_imports(path.read_text()) == [], path
