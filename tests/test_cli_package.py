"""The command line is one package: every command registered one way, each user error one sentence."""

from __future__ import annotations

from typer.testing import CliRunner

from tbdkit.cli import app
from tbdkit.cli.main import COMMANDS, GROUPS
from tbdkit.core.paths import KIT_ROOT
from tbdkit.report import reference_table

runner = CliRunner()
EXPECTED = {"bench", "list", "sweep", "show", "runs", "report", "bundle", "reproduce", "render", "describe",
            "overhead", "doctor", "setup", "calibrate", "reference", "compare", "kick-the-tires", "images", "data",
            "check-workload", "gather"}


def test_every_command_is_registered_once_under_its_name():
    names = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
    assert sorted(names) == sorted(EXPECTED) == sorted(set(COMMANDS) | set(GROUPS))


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
