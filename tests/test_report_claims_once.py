"""`tbdkit report` prints the claim checks its build computed: the twelve checks run once, in the report
layer, never again in the command."""

from __future__ import annotations

from typer.testing import CliRunner

from tbdkit.cli import app
from tbdkit.report import claims

from tests.test_store import make_run


def test_the_claims_are_checked_once_and_printed_as_built(tmp_path, monkeypatch):
    results = tmp_path / "r"
    make_run(results, "20260101-000000-a")
    make_run(results, "20260101-000001-b", throughput=14.0)
    calls: list[int] = []
    real = claims.check_all
    monkeypatch.setattr(claims, "check_all", lambda runs: calls.append(len(runs)) or real(runs))
    out = CliRunner().invoke(app, ["report", str(results), "-o", str(tmp_path / "rep")])
    assert out.exit_code == 0, (out.output, out.exception)
    assert len(calls) == 1
    verdicts = real([])  # the claims, each printed once with its number
    assert all(f"{v.n:>2}. " in out.output for v in verdicts)
    assert "report: " in out.output and (tmp_path / "rep" / "report.html").is_file()
