"""`tbdkit doctor` (what this machine has) and `tbdkit setup` (the framework stacks: installed from their
locks, or adopted from an interpreter that already holds the framework)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tbdkit.bench.plan import split_list
from tbdkit.cli.console import console, styled
from tbdkit.core.errors import UserError
from tbdkit.env import stacks
from tbdkit.env.adopt import adopt as adopt_stack


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
        mark = styled({True: "[green]yes[/]", False: "[red]no[/]", None: "[dim]n/a[/]"}[c.ok])
        table.add_row(c.area, c.name, mark, c.detail, c.fix or "")
    console.print(table)


def setup(
    names: Annotated[list[str] | None, typer.Argument(help="stacks to install, or 'all' (default: pytorch)")] = None,
    force: Annotated[bool, typer.Option(help="reinstall even if current")] = False,
    installer: Annotated[str, typer.Option(help="auto (uv when installed, else pip), uv or pip")] = "auto",
    adopt: Annotated[
        str | None,
        typer.Option(
            "--adopt",
            metavar="PYTHON",
            help="use this interpreter's own framework build (a rented GPU's, an NGC container's) instead of "
            "installing the lock's: the stack becomes an overlay of it, never reinstalled",
        ),
    ] = None,
    wheels: Annotated[
        Path | None,
        typer.Option(
            "--wheels", metavar="DIR", help="with --adopt: install what the kit lacks from these wheels, no network"
        ),
    ] = None,
) -> None:
    """Create each framework stack's virtual environment from its lock, exactly (idempotent); or, with
    --adopt PYTHON, over an interpreter that already holds the framework."""
    if installer not in ("auto", "uv", "pip"):
        raise UserError(f"--installer must be auto, uv or pip, not '{installer}'.")
    if wheels is not None and adopt is None:
        raise UserError("--wheels goes with --adopt PYTHON (a lock's install takes its packages from the index).")
    for name in [n for raw in split_list(names) or ["pytorch"] for n in (stacks.STACKS if raw == "all" else [raw])]:
        stack = stacks.get(name)
        if stack.kit_env:
            console.print(f"{stack.title} stack: {stacks.KIT_ENV_NOTE} ({stacks.venv_path(name)})", highlight=False)
            continue
        if adopt is not None:
            with console.status(f"adopting {adopt} as the {stack.title} stack in {stacks.venv_path(name)} ..."):
                record = adopt_stack(name, adopt, wheels, force=force)
            console.print(adopted_text(stack.title, record), highlight=False)
            continue
        if not force and stacks.is_current(name):
            record = stacks.marker(name) or {}
            how = f"adopted from {record['adopted'].get('python')}" if stacks.is_adopted(record) else "installed"
            console.print(f"{stack.title} stack: already {how} in {stacks.venv_path(name)}", highlight=False)
            continue
        with console.status(f"installing the {stack.title} stack in {stacks.venv_path(name)} ..."):
            record = stacks.setup(name, force=force, how=installer)
        console.print(
            f"{stack.title} stack: installed {stack.module} {record.get('framework_version')} "
            f"in {stacks.venv_path(name)} from {record.get('lock_file')} with {record.get('installer')}"
        )


def adopted_text(title: str, record: dict) -> str:
    adopted = record["adopted"]
    lines = [
        f"{title} stack: adopted {record.get('framework_version')} of {adopted['python']} "
        f"(Python {adopted['python_version']}) in {Path(record['python']).parent.parent}"
    ]
    if record.get("from_wheels"):
        lines.append(f"  installed from {record['wheels']}: {', '.join(record['from_wheels'])}")
    for note in record.get("notes") or []:
        lines.append(f"  {note}")
    for m in record.get("missing") or []:
        lines.append(f"  not installed: {m['requirement']} ({m['why']})")
    if record.get("missing"):
        lines.append("  the models that need those do not run on this stack; the kit itself does")
    diff = record.get("differences") or []
    lines.append(
        f"  {len(diff)} package(s) differ from {record.get('lock_file')}: kept as they are, and recorded in each run's env.json"
    )
    return "\n".join(lines)
