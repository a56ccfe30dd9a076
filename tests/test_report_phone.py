"""report.html on a phone: Chromium at 390 px (CSS) wide shows it without scrolling the page sideways (wide
tables scroll inside their own box), at a legible size (a viewport meta), and a CPU-only report where every
run was disturbed says at its top that these are CPU runs while every claim says it needs GPU runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from report_fixtures import make_run
from test_report import full_fixture
from trace_readers import browser
from tbdkit.report import build_report

PHONE = {"width": 390, "height": 844}


def cpu_runs_all_disturbed(results: Path) -> None:
    for framework, thr in (("pytorch", 1.6), ("tensorflow", 1.2), ("mxnet", 1.4)):
        for batch in (4, 8):
            run = make_run(results, "deepspeech2", framework, batch, thr * batch)
            summary = json.loads((run / "summary.json").read_text())
            summary.update(status="disturbed", graph="compiled" if framework == "pytorch" else "standard",
                           disturbed_reasons=["foreign CPU load: other processes used 1.73 core-equivalents of "
                                              "the run's 2 core(s) (limit 0.25)"])
            (run / "summary.json").write_text(json.dumps(summary))


def on_a_phone(html: Path, shot: Path) -> dict:
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=browser(), args=["--no-sandbox"])
        page = b.new_page(viewport=PHONE, device_scale_factor=1, is_mobile=True, has_touch=True)
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        page.screenshot(path=str(shot), full_page=True)
        got = page.evaluate("""() => ({
            page: document.scrollingElement.scrollWidth,
            viewport: window.innerWidth,
            runs: (() => { const t = document.querySelector('#runs-table');
                           return t ? {box: t.clientWidth, table: t.scrollWidth} : null; })(),
            body_font: parseFloat(getComputedStyle(document.body).fontSize),
            cpu_only: (document.querySelector('#cpu-only') || {}).textContent || null,
            verdicts: [...document.querySelectorAll('#claims + p + table td:nth-child(3)')].map(td => td.textContent),
            headers: [...document.querySelectorAll('#runs-table th')].map(th => th.textContent),
        })""")
        b.close()
    assert shot.stat().st_size > 10_000
    return got


def test_a_cpu_only_all_disturbed_report_fits_a_phone_and_says_these_are_cpu_runs(tmp_path):
    results = tmp_path / "results"
    cpu_runs_all_disturbed(results)
    got = on_a_phone(build_report(results, tmp_path / "report"), tmp_path / "phone.png")
    assert got["viewport"] == 390 and got["page"] <= 390, got
    assert got["runs"]["table"] > got["runs"]["box"]  # the wide table scrolls inside its own box
    assert got["body_font"] >= 14  # the viewport meta: no zooming out to a desktop width
    assert got["cpu_only"].startswith("These are CPU runs") and "every run was disturbed" in got["cpu_only"]
    assert len(got["verdicts"]) == 12 and set(got["verdicts"]) == {"needs GPU runs"}, got["verdicts"]
    assert "graph" in got["headers"] and "flag" in got["headers"]
    html = (tmp_path / "report" / "report.html").read_text()
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
    # the graph column says which runs were compiled; the flag column holds words, the reasons are listed below
    assert html.count("<td>compiled</td>") == 2 and html.count("<td>disturbed, uncalibrated</td>") == 6
    assert html.count("foreign CPU load: other processes used 1.73") == 6  # once per run, in the list below


def test_the_full_report_fits_a_phone(tmp_path):
    results = tmp_path / "results"
    full_fixture(results)
    got = on_a_phone(build_report(results, tmp_path / "report"), tmp_path / "phone.png")
    assert got["page"] <= 390, got
    assert got["cpu_only"] is None
