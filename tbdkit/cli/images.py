"""`tbdkit images`: build, lock and list the framework images of docker/images.lock."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from tbdkit.cli.console import console, styled
from tbdkit.core.errors import UserError
from tbdkit.env import images

app = typer.Typer(no_args_is_help=True, help="Build, lock and list the framework images (docker/images.lock).")


def parse_build_args(values: list[str] | None) -> dict[str, str]:
    out = {}
    for raw in values or []:
        key, sep, value = raw.partition("=")
        if not sep or not key:
            raise UserError(f"Build argument '{raw}' is not KEY=VALUE: pass e.g. --build-arg REQUIRE_NCU=0.")
        out[key] = value
    return out


@app.command("build")
def build_cmd(
    names: Annotated[list[str] | None, typer.Argument(help="images to build (default: pytorch)")] = None,
    base_image: Annotated[
        str | None, typer.Option("--base-image", help="build on this base instead of the locked one")
    ] = None,
    build_arg: Annotated[
        list[str] | None, typer.Option("--build-arg", help="KEY=VALUE, passed to docker build")
    ] = None,
    tag: Annotated[str | None, typer.Option(help="tag the image so (default: tbdkit/<stack>:<kit version>)")] = None,
) -> None:
    """Build framework images from their Dockerfiles, on the locked NGC base by default."""
    args = parse_build_args(build_arg)
    for name in names or ["pytorch"]:
        spec = images.get_spec(name)
        if base_image is None and not spec.digest:
            console.print(
                f"{name}: the base {spec.base} has no digest in images.lock yet; building from the "
                f"tag alone (run `tbdkit images lock {name}` to pin it)",
                style="yellow",
            )
        with console.status(f"building {tag or images.image_ref(name)} ..."):
            found = images.build(name, tag=tag, base=base_image, build_args=args)
        console.print(f"{name}: built {found['ref']} {found['id']} ({(found['size_bytes'] or 0) / 2**20:,.0f} MiB)")


@app.command("lock")
def lock_cmd(names: Annotated[list[str] | None, typer.Argument(help="images to lock (default: all)")] = None) -> None:
    """Pull each base image by tag and record its digest in docker/images.lock."""
    for name in names or list(images.load_lock()):
        with console.status(f"pulling the base of {name} ..."):
            digest = images.lock(name)
        console.print(f"{name}: {images.get_spec(name).base}@{digest}")


@app.command("list")
def list_cmd(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The locked images, whether each is built here, and Docker's state."""
    rows = images.doctor_checks()
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"Images ({images.lock_path()})")
    for col in ("check", "", "found", "fix"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["check"], styled({True: "[green]yes[/]", False: "[red]no[/]", None: "n/a"}[r["ok"]]), r["found"], r["fix"]
        )
    console.print(table)
