"""Errors a user can cause: each carries one clear sentence and the fix."""

from __future__ import annotations

import sys
from collections.abc import Callable


class UserError(Exception):
    """A problem the user can fix; str() is the whole message shown, never a traceback."""


def exit_code(prog: str, body: Callable[[], object]) -> int:
    """Run a bare-Python command's body: 0, or 2 with `prog: <the sentence>` on stderr for a UserError."""
    try:
        body()
    except UserError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    return 0
