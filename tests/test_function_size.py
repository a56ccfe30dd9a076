"""Functions a newcomer can read: none in tbdkit/ over 100 lines, and the agent's run a short sequence of
stages of at most 60 lines each (tbdkit/agent/run.py)."""

from __future__ import annotations

import ast
from pathlib import Path

KIT = Path(__file__).resolve().parents[1] / "tbdkit"
LONGEST = 100
STAGE_LONGEST = 60
STAGES = ("execute", "begin", "prepare", "train_to_target", "compile_step", "warm_up", "measure", "analyse",
          "finish", "failed", "write")


def lengths(path: Path) -> dict[str, int]:
    return {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None
    }


def test_no_function_is_over_a_hundred_lines():
    long = {
        f"{path.relative_to(KIT).as_posix()}:{name}": n
        for path in sorted(KIT.rglob("*.py"))
        for name, n in lengths(path).items()
        if n > LONGEST
    }
    assert long == {}


def test_the_agent_runs_short_named_stages():
    found = lengths(KIT / "agent" / "run.py")
    assert set(STAGES) <= set(found)
    assert {s: found[s] for s in STAGES if found[s] > STAGE_LONGEST} == {}
    assert "TBDKIT_TEST_KILL_RANK" not in "".join(p.read_text() for p in KIT.rglob("*.py"))  # test hooks live in tests/
