"""What the commands share: the results option and the one way a user's error is printed."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from tbdkit import catalog
from tbdkit.console import err_console
from tbdkit.errors import UserError

ResultsOpt = Annotated[Path, typer.Option("--results", "-r", help="results folder")]


def friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """User errors become one red sentence and exit code 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            # UserError, and a workload's DataError (workloads cannot import the kit's class)
            if not isinstance(exc, UserError) and not catalog.is_data_error(exc):
                raise
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
            raise typer.Exit(2) from None
    return wrapper
