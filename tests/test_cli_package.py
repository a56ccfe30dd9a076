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


def test_a_ctrl_c_no_run_handled_exits_130_with_a_sentence(tmp_path, monkeypatch):
    """A Ctrl-C while `tbdkit report` draws (a real SIGINT to this process; Python's own handler raises
    KeyboardInterrupt in the command, as in a terminal) ends it with 130, the shell's code for SIGINT, and one
    sentence on what to do (Typer alone ends it in silence). A run's own Ctrl-C is its launcher's
    (tests/test_bench_cli.py)."""
    import signal

    import tbdkit.report

    def drawing(*_args, **_kwargs):
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(tbdkit.report, "make_report", drawing)
    (tmp_path / "results").mkdir()
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = runner.invoke(app, ["report", str(tmp_path / "results"), "-o", str(tmp_path / "report")])
    finally:
        signal.signal(signal.SIGINT, before)
    text = " ".join(result.output.split())
    assert result.exit_code == 130 and "Aborted" not in text and "Traceback" not in text, result.output
    assert text == "Interrupted (Ctrl-C) before the command finished: run it again to redo it (a sweep resumes where it " \
        "stopped).", text
