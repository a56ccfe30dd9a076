"""The `tbdkit` application: every command registered here, one way, each wrapped so a user's
error prints one sentence (cli.common.friendly). The commands live in the modules beside this one
and hold only parsing and printing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from tbdkit.bench import progress
from tbdkit.cli import (
    artifact,
    bench,
    calibrate,
    check_workload,
    compare,
    console,
    data,
    images,
    kick,
    machine,
    network,
    reference,
    render,
    report,
    runs,
    slurm,
    sweep,
)
from tbdkit.cli.common import friendly

progress.use(console.live)  # bench and sweep report their progress through the terminal's live bars

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="tbdkit: the TBD training benchmark, measured the same way every time.",
)

COMMANDS: dict[str, Callable[..., Any]] = {
    "bench": bench.bench,
    "list": bench.list_models,
    "sweep": sweep.sweep,
    "show": runs.show,
    "runs": runs.runs,
    "report": report.report,
    "bundle": artifact.bundle,
    "reproduce": artifact.reproduce,
    "render": render.render,
    "describe": network.describe,
    "check-workload": check_workload.check_workload,
    "overhead": network.overhead,
    "doctor": machine.doctor,
    "setup": machine.setup,
    "calibrate": calibrate.calibrate,
    "reference": reference.reference,
    "compare": compare.compare,
    "kick-the-tires": kick.kick_the_tires,
    "gather": slurm.gather,
}
GROUPS: dict[str, typer.Typer] = {"images": images.app, "data": data.app}

for _name, _command in COMMANDS.items():
    app.command(_name)(friendly(_command))
for _name, _group in GROUPS.items():
    for _sub in _group.registered_commands:
        if _sub.callback is not None:
            _sub.callback = friendly(_sub.callback)
    app.add_typer(_group, name=_name)


def main() -> None:
    app()
