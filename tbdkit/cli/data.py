"""`tbdkit data prepare MODEL --from PATH`: say what layout a model's real dataset must have, and
check a folder against it with the same reader a run uses, decoding every file once (the check
before each run decodes a sample). Nothing is downloaded: datasets
come from where the user has them (licences, sizes and mirrors differ; the kit never fetches)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from tbdkit.cli.console import console, styled
from tbdkit.core.errors import UserError
from tbdkit.spec import catalog

app = typer.Typer(help="Real datasets: their expected layout, checked before any run.", no_args_is_help=True)


@app.command()
def prepare(
    model: Annotated[str, typer.Argument(help="model (see `tbdkit list`)")],
    source: Annotated[Path | None, typer.Option("--from", help="the folder holding the dataset")] = None,
    preset: Annotated[str, typer.Option(help="smoke | paper: the sizes the check uses")] = "paper",
) -> None:
    """Explain MODEL's dataset layout; with --from, check that folder as a run would read it."""
    m = catalog.get(model)
    hp = m.hp(preset)
    info = m.info
    console.print(styled("[bold]{}[/] trains on {}.", info.get("title", model), info.get("dataset", "its dataset")))
    console.print(f"expected layout: {info.get('dataset_layout', 'not stated in workload.toml')}", highlight=False)
    if source is None:
        console.print(
            f"check a copy with `{shlex.join(['tbdkit', 'data', 'prepare', model])} --from PATH`, then run "
            f"it with `{shlex.join(['make', 'bench', f'MODEL={model}'])} DATA=PATH`; synthetic data of the "
            "same shapes is the default.",
            highlight=False,
        )
        return
    source = source.expanduser().resolve()
    if not source.exists():
        raise UserError(f"No file or folder at {source}: pass --from the folder that holds the dataset.")
    console.print(f"checking {source}: every file is decoded once (large datasets take a while)...", highlight=False)
    described = catalog.check_source(m, str(source), hp, full=True)
    console.print(styled("[green]ok[/]: {}", described), highlight=False)
    # one shell word per argument, on one line: the suggestion can be pasted into a shell as it is
    console.print(
        f"run it with `{shlex.join(['make', 'bench', f'MODEL={model}', f'DATA={source}'])}`",
        highlight=False,
        soft_wrap=True,
    )
