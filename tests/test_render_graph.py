"""`tbdkit render` takes every precision and graph a run takes: its help names bf16, and --graph compiled
reaches the spec.json the rendered job runs."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tbdkit.cli import app


def test_render_help_names_bf16_and_graph():
    out = CliRunner().invoke(app, ["render", "--help"], env={"COLUMNS": "200"}).output
    assert "bf16" in out and "--graph" in out and "compiled" in out


def test_render_writes_a_compiled_jobs_spec(tmp_path):
    got = CliRunner().invoke(app, ["render", "--target", "torchrun", "--preset", "smoke", "--precision", "bf16",
                                   "--graph", "compiled", "-o", str(tmp_path / "job")])
    assert got.exit_code == 0, got.output
    spec = json.loads((tmp_path / "job" / "spec.json").read_text())
    assert spec["graph"] == "compiled" and spec["precision"] == "bf16"
