"""The command line is one package: every command registered one way, each user error one sentence."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from tbdkit.cli import app
from tbdkit.cli.main import COMMANDS, GROUPS
from tbdkit.core.paths import KIT_ROOT
from tbdkit.report import reference_table

runner = CliRunner()
EXPECTED = {"bench", "list", "sweep", "show", "runs", "report", "bundle", "reproduce", "render", "describe",
            "overhead", "doctor", "setup", "calibrate", "reference", "compare", "kick-the-tires", "images", "data",
            "check-workload", "gather"}


def listed_commands(help_text: str) -> list[str]:
    """The command names `tbdkit --help` lists in its Commands panel (rich's box: '│ name   summary')."""
    panel = help_text.split("Commands ", 1)[1]
    return re.findall(r"^│ (\S+) {2,}", panel, re.M)


def test_every_command_a_user_types_answers_under_its_name():
    """`tbdkit --help` lists each command once, and each (a group's subcommands too) answers `--help` under its own
    name: the commands users type, not the registry's dictionary, are the ones expected."""
    shown = runner.invoke(app, ["--help"])
    assert shown.exit_code == 0, shown.output
    names = listed_commands(shown.output)
    assert sorted(names) == sorted(EXPECTED) == sorted(set(COMMANDS) | set(GROUPS)), names
    for name in names:
        subcommands = [c.name for c in GROUPS[name].registered_commands] if name in GROUPS else [None]
        for sub in subcommands:
            args = [name, *([sub] if sub else []), "--help"]
            result = runner.invoke(app, args)
            assert result.exit_code == 0 and f"{' '.join(args[:-1])} [OPTIONS]" in result.output, (args, result.output)
    unknown = runner.invoke(app, ["benhc"])
    assert unknown.exit_code == 2 and "No such command 'benhc'" in unknown.output


def test_reference_is_a_tbdkit_command_whose_unknown_model_is_one_sentence():
    result = runner.invoke(app, ["reference", "--model", "nosuchmodel"])
    assert result.exit_code == 2
    text = " ".join(result.output.split())  # rich wraps at the terminal's width
    assert text.startswith("error: No PyTorch model named 'nosuchmodel': choose from ") and text.count("error:") == 1
    assert "Traceback" not in result.output


def test_reference_table_prints_the_committed_results_as_markdown():
    result = runner.invoke(app, ["reference", "--table"])
    assert result.exit_code == 0, result.output
    assert result.output == reference_table.markdown(KIT_ROOT / "workloads") + "\n"
