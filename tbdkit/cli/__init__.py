"""The tbdkit command line (Typer + rich): one module per command group, registered in cli.main."""

from tbdkit.cli.main import app, main

__all__ = ["app", "main"]
