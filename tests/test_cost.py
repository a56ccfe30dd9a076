"""Cost at the user's price (tbdkit.analysis.cost): where the price comes from and when it was given, the
arithmetic, the errors a user can make; and the report's energy, cost and comparison sections."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from report_fixtures import make_run

from tbdkit.core import paths
from tbdkit.analysis import cost
from tbdkit.core.errors import UserError
from tbdkit.report import build_report


@pytest.fixture(autouse=True)
def no_price_in_env(monkeypatch):
    monkeypatch.delenv(cost.ENV_PRICE, raising=False)
    monkeypatch.delenv(cost.ENV_PRICES, raising=False)


def test_the_option_wins_then_the_variable_then_prices_toml(tmp_path, monkeypatch):
    assert cost.resolve(None, cwd=tmp_path) is None  # the kit ships no prices
    (tmp_path / "prices.toml").write_text('given = "2026-11-01"\ncurrency = "EUR"\n[price_per_hour]\n'
                                          '"NVIDIA H100 80GB HBM3" = 3.0\ndefault = 1.0\n')
    from_file = cost.resolve(None, cwd=tmp_path)
    h100 = cost.price_of(from_file, "NVIDIA H100 80GB HBM3")
    assert h100.per_hour == 3.0 and h100.currency == "EUR" and h100.given == "2026-11-01"
    assert "prices.toml [NVIDIA H100 80GB HBM3]" in h100.text and "given 2026-11-01" in h100.text
    assert cost.price_of(from_file, "CPU: something").per_hour == 1.0
    monkeypatch.setenv(cost.ENV_PRICE, "2.0")
    assert cost.price_of(cost.resolve(None, cwd=tmp_path), "x").source == cost.ENV_PRICE
    flag = cost.price_of(cost.resolve(2.5, cwd=tmp_path), "x")
    assert flag.per_hour == 2.5 and flag.source == "--price-per-hour" and flag.given.startswith("20")


@pytest.mark.parametrize("text, message", [
    ('[price_per_hour]\ndefault = 1.0\n', "does not say when"),
    ('given = "2026-11-01"\n', "no [price_per_hour] table"),
    ('given = "2026-11-01"\n[price_per_hour]\ndefault = -1\n', "positive number"),
    ('given = "2026-11-01"\n[price_per_hour\n', "cannot be read as TOML"),
    ('given = "2026-11-01"\n[price_per_hour]\ndefault = true\n', "default is True, not a number"),
    ('given = "2026-11-01"\n[price_per_hour]\ndefault = "2.5"\n', "default is '2.5', not a number"),
    ('given = "2026-11-01"\n[price_per_hour]\ndefault = [1]\n', "not a number"),
    (b'given = "2026-11-01"\n# \xff\xfe\n[price_per_hour]\ndefault = 1.0\n', "is not UTF-8 text"),
])
def test_a_wrong_prices_file_is_one_sentence(tmp_path, text, message):
    if isinstance(text, bytes):
        (tmp_path / "prices.toml").write_bytes(text)
    else:
        (tmp_path / "prices.toml").write_text(text)
    with pytest.raises(UserError, match=message.replace("[", r"\[")):
        cost.resolve(None, cwd=tmp_path)


def test_cost_per_million_samples_and_of_the_run():
    price = cost.Price(2.5, "USD", "--price-per-hour", "2026-11-24T13:00:00+00:00")
    summary = {"wall_s": 1800.0, "metrics": {"sample_throughput": {"value": 100.0, "unit": "images/s"}}}
    c = cost.costs(summary, price)
    assert c["cost_per_million_samples"]["value"] == pytest.approx(2.5 / 3600 / 100 * 1e6)
    assert c["cost_per_million_samples"]["unit"] == "USD/1M samples"
    assert c["run_cost"]["value"] == pytest.approx(1.25) and c["run_cost"]["price_given"] == price.given
    assert "2.5 USD/h (--price-per-hour, given 2026-11-24" in c["run_cost"]["method"]
    assert cost.costs({"metrics": {}}, price)["run_cost"]["value"] is None
    assert cost.costs(summary, None)["run_cost"]["reason"]


def test_bench_refuses_a_prices_file_that_is_not_text_before_training(tmp_path):
    (tmp_path / "prices.toml").write_bytes(b'given = "2026-11-01"\n[price_per_hour]\ndefault = 1.0 # \xff\n')
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "bench", "--results", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**{k: v for k, v in os.environ.items() if k not in (cost.ENV_PRICE, cost.ENV_PRICES)},
                               "COLUMNS": "300"})
    assert proc.returncode == 2 and "is not UTF-8 text" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


def test_bench_refuses_a_bad_price_before_running(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "bench", "--price-per-hour", "-3", "--results",
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != cost.ENV_PRICE})
    assert proc.returncode == 2 and "positive number" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and not list(tmp_path.iterdir())


def _with_energy(run: Path, samples_per_kj: float | None, wall_s: float = 60.0) -> Path:
    path = run / "summary.json"
    s = json.loads(path.read_text())
    s["wall_s"] = wall_s
    s["window"] = {"iterations": 20, "seconds": 10.0, "stop_reason": "time_cap"}
    s["metrics"]["sample_throughput"] = {"value": s["metrics"]["throughput"]["value"], "unit": "samples/s",
                                         "method": "fixture"}
    if samples_per_kj is None:
        for name in ("cpu_energy", "cpu_power", "energy_per_work", "samples_per_kj"):
            s["metrics"][name] = {"value": None, "unit": "J", "method": "fixture", "reason": "no RAPL in this VM"}
    else:
        s["metrics"]["cpu_energy"] = {"value": 500.0, "unit": "J", "method": "fixture"}
        s["metrics"]["cpu_power"] = {"value": 50.0, "unit": "W", "method": "fixture"}
        s["metrics"]["energy_per_work"] = {"value": 0.25, "unit": "J/samples", "method": "fixture"}
        s["metrics"]["samples_per_kj"] = {"value": samples_per_kj, "unit": "samples/kJ", "method": "fixture"}
    path.write_text(json.dumps(s))
    return run


def test_report_shows_energy_cost_and_the_reference_comparison(tmp_path, monkeypatch):
    results = tmp_path / "results"
    for batch, thr, spk in ((2, 10.0, 4000.0), (4, 18.0, 6000.0)):
        _with_energy(make_run(results, "resnet50", "pytorch", batch, thr), spk)
    _with_energy(make_run(results, "resnet50", "tensorflow", 2, 9.0), None)
    workloads = tmp_path / "workloads"
    monkeypatch.setattr(paths, "KIT_WORKLOADS", workloads)
    build_report(results, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Energy over the sample window" in md and "4,000 samples/kJ" in md
    assert "— [1]" in md and "[1] no RAPL in this VM" in md
    assert "No price was given" in md and "holds none for them yet" in md
    assert (tmp_path / "out" / "figures" / "energy_samples_per_kj.png").is_file()

    reference = workloads / "resnet50" / "reference"
    _with_energy(make_run(reference, "resnet50", "pytorch", 2, 12.0), 4000.0)
    build_report(results, tmp_path / "out", prices=cost.resolve(2.5))
    md = (tmp_path / "out" / "report.md").read_text()
    assert "2.5 USD/h (--price-per-hour, given " in md
    assert f"{2.5 / 3600 / 10.0 * 1e6:,.4g} USD/1M samples" in md and "0.04167 USD" in md
    (row,) = [line for line in md.splitlines() if "reference/" in line]
    assert "slower (within one run each)" in row and "b2" in row   # 10 against the reference's 12, each +-1%


def test_sweep_prints_the_cost_of_its_ok_points(tmp_path):
    from rich.console import Console

    from tbdkit.cli.common import cost_table
    from tbdkit.cli.sweep import _ok_summaries

    run = _with_energy(make_run(tmp_path, "resnet50", "pytorch", 2, 10.0), None, wall_s=7200.0)
    state = {"points": {"a": {"status": "ok", "run_id": run.name}, "b": {"status": "oom", "run_id": "gone"}}}
    summaries = _ok_summaries(state, tmp_path)
    assert [s["run_id"] for s in summaries] == [run.name]
    console = Console(width=250, record=True)
    console.print(cost_table(summaries, tmp_path, cost.resolve(2.5)))
    text = console.export_text()
    assert "5 USD" in text and f"{2.5 / 3600 / 10.0 * 1e6:,.4g} USD" in text and "at 2.5 USD/h (--price-per-hour" in text
