"""`tbdkit doctor` (what this machine has) and `tbdkit setup` (the framework stacks)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from tbdkit.bench.plan import split_list
from tbdkit.cli.console import console
from tbdkit.core.errors import UserError
from tbdkit.env import stacks


def doctor(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """What this machine has: GPU, driver, NVML, Docker, frameworks, profiling counters."""
    from tbdkit.env import doctor as doc

    checks = doc.checks()
    if as_json:
        print(json.dumps(doc.as_dict(checks), indent=2))
        return
    table = Table(title="tbdkit doctor")
    for col in ("area", "check", "", "found", "fix"):
        table.add_column(col)
    for c in checks:
        mark = {True: "[green]yes[/]", False: "[red]no[/]", None: "[dim]n/a[/]"}[c.ok]
        table.add_row(c.area, c.name, mark, c.detail, c.fix or "")
    console.print(table)


def setup(
    names: Annotated[list[str] | None, typer.Argument(help="stacks to install, or 'all' (default: pytorch)")] = None,
    force: Annotated[bool, typer.Option(help="reinstall even if current")] = False,
    installer: Annotated[str, typer.Option(help="auto (uv when installed, else pip), uv or pip")] = "auto",
) -> None:
    """Create each framework stack's virtual environment from its lock, exactly (idempotent)."""
    if installer not in ("auto", "uv", "pip"):
        raise UserError(f"--installer must be auto, uv or pip, not '{installer}'.")
    for name in [n for raw in split_list(names) or ["pytorch"] for n in (stacks.STACKS if raw == "all" else [raw])]:
        stack = stacks.get(name)
        if stacks.is_current(name) and not force:
            console.print(f"{stack.title} stack: already installed in {stacks.venv_path(name)}")
            continue
        with console.status(f"installing the {stack.title} stack in {stacks.venv_path(name)} ..."):
            record = stacks.setup(name, force=force, how=installer)
        console.print(
            f"{stack.title} stack: installed {stack.module} {record.get('framework_version')} "
            f"in {stacks.venv_path(name)} from {record.get('lock_file')} with {record.get('installer')}"
        )
