"""What the kit prints or writes from a file is text, never a command to the program that shows it.

A terminal acts on control sequences: a bundle's run id holding `ESC[2J` would clear the screen before
`reproduce` asks to run its plan, `ESC[8m` would hide the plan, and a summary's error holding a cursor-up and
an erase-line would wipe the line above it in `show`. The console drops every control character from what it
prints (tests/test_cli_markup.py drives each command with markup the same way). A spreadsheet acts on
formulas: a cell of summary.csv starting with `=`, `+`, `-`, `@`, a tab or a carriage return is a formula to
Excel and LibreOffice, so such a text cell is written with a leading `'` (OWASP's rule), while numbers stay
numbers."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from report_fixtures import make_run
from tbdkit.cli import app
from tbdkit.cli import console as cli_console
from tbdkit.results import sink

CLEAR, HIDE = "\x1b[2J", "\x1b[8m"
UP_ERASE = "\x1b[1A\x1b[2K"
C1_CSI = "\x9b2J"  # a one-byte CSI to some terminals


@pytest.fixture
def wide(monkeypatch, tmp_path):
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path / "no-stacks"))  # nothing can train
    monkeypatch.delenv("TBDKIT_RESULTS", raising=False)
    for c in (cli_console.console, cli_console.err_console):
        monkeypatch.setattr(c, "_width", 4000)


def _hostile_run(results: Path, *, status: str = "ok", error: str | None = None) -> str:
    """A run whose id (and folder) holds a clear-screen, a hide and a C1 CSI; returns the id."""
    run = make_run(results, "deepspeech2", "pytorch", 2, 10.0)
    run_id = f"{run.name}-x{CLEAR}{HIDE}{C1_CSI}y"
    summary = json.loads((run / "summary.json").read_text())
    summary |= {"run_id": run_id, "status": status, **({"error": error} if error else {})}
    (run / "summary.json").write_text(json.dumps(summary))
    run.rename(run.with_name(run_id))
    (results / "index.sqlite").unlink(missing_ok=True)
    return run_id


def _no_controls(output: str) -> None:
    assert not any(c in output for c in ("\x1b", "\x9b", "\x07", "\x08")), repr(output)


def test_reproduce_prints_a_hostile_run_id_in_its_plan_as_text(wide, tmp_path):
    results = tmp_path / "results"
    _hostile_run(results)
    bundle = tmp_path / "b.tar.gz"
    made = CliRunner().invoke(app, ["bundle", str(results), "-o", str(bundle)])
    assert made.exit_code == 0, made.output
    out = CliRunner().invoke(app, ["reproduce", str(bundle), "-r", str(tmp_path / "again")], input="")
    assert "the plan" in out.output and "recorded run" in out.output, out.output
    _no_controls(out.output)
    assert "-x[2J[8m2Jy" in out.output  # the id is there, as text


def test_show_prints_a_hostile_error_as_text(wide, tmp_path):
    results = tmp_path / "results"
    run_id = _hostile_run(results, status="failed", error=f"the loss was NaN{UP_ERASE} and more")
    for args in (["show", "last", "-r", str(results)], ["show", run_id, "-r", str(results)]):
        out = CliRunner().invoke(app, args)
        _no_controls(out.output)
        assert "the loss was NaN[1A[2K and more" in out.output, out.output


def test_runs_lists_a_hostile_run_id_as_text(wide, tmp_path):
    results = tmp_path / "results"
    _hostile_run(results)
    out = CliRunner().invoke(app, ["runs", "-r", str(results)])
    assert out.exit_code == 0, out.output
    _no_controls(out.output)
    assert "-x[2J[8m2Jy" in out.output


def test_the_console_keeps_its_own_styles_and_newlines():
    """On a terminal the kit's colours still reach it; only the text's controls are dropped."""
    console = cli_console.PlainConsole(force_terminal=True, color_system="standard", width=80)
    with console.capture() as captured:
        console.print(cli_console.styled("[red]{}[/]", f"a{CLEAR}b\tc\nd"))
    text = captured.get()
    assert "\x1b[31m" in text and "\x1b[2J" not in text and "a[2Jb" in text, repr(text)
    assert text.count("\n") == 2 and "c" in text, repr(text)  # the newline and what follows the tab stay


FORMULAS = ["=1+1", "+A1*2", "-cmd|' /C calc'!A0", "@SUM(A1)", "\t=1", "\r=1"]


@pytest.mark.parametrize("text", FORMULAS)
def test_a_formula_from_a_run_file_is_text_in_summary_csv(tmp_path, text):
    results = tmp_path / "results"
    run = make_run(results, "deepspeech2", "pytorch", 2, 10.0)
    summary = json.loads((run / "summary.json").read_text())
    summary |= {"status": "disturbed", "disturbed_reasons": [text], "data": text}
    summary["metrics"]["throughput"]["unit"] = text
    (run / "summary.json").write_text(json.dumps(summary))
    (results / "index.sqlite").unlink(missing_ok=True)
    out = CliRunner().invoke(app, ["report", str(results), "-o", str(tmp_path / "rep")])
    assert out.exit_code == 0, out.output
    with (tmp_path / "rep" / "summary.csv").open(newline="") as f:
        (row,) = list(csv.DictReader(f))
    for column in ("data", "throughput_unit", "disturbed_reasons"):
        assert row[column] == "'" + text, (column, row[column])
    assert float(row["throughput"]) == 10.0  # numbers stay numbers


def test_the_kit_s_csv_writer_neutralizes_text_and_keeps_numbers(tmp_path):
    path = tmp_path / "k.csv"
    sink.write_csv(path, [{"name": "=HYPERLINK(\"x\")", "value": -1.5, "n": -3, "text_number": "-2.5e3", "ok": "a-b"}])
    with path.open(newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row == {"name": "'=HYPERLINK(\"x\")", "value": "-1.5", "n": "-3", "text_number": "-2.5e3", "ok": "a-b"}
