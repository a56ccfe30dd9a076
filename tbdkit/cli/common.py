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
CpusOpt = Annotated[int | None, typer.Option(
    "--cpus", help="cores each run is given: the frameworks' intra-op threads are set from it, a data-loading "
    "worker counted against it (default: every core of the affinity mask and cgroup quota)")]
PinOpt = Annotated[bool, typer.Option("--pin", help="pin each run's process to its --cpus cores (sched_setaffinity)")]


def check_cpus(requested: int | None) -> int | None:
    """`--cpus` as given, or a UserError when this machine cannot give that many cores."""
    from tbdkit import cpus

    why = cpus.check_request(requested)
    if why:
        raise UserError(why[0].upper() + why[1:] + ".")
    return requested


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
