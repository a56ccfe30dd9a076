"""Fuzz: report.html shows what run folders and prices.toml hold as text, never as markup. Every text a
run writes (every string in summary.json, env.json, spec.json, memory.json, kernels.csv, the folder's own
name) and prices.toml's currency carries a script or an event handler; the report escapes each, so no
element or attribute of the page comes from a run's files. Autoescaping must hold for every template."""

from __future__ import annotations

import csv
import json
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from report_fixtures import make_run
from tbdkit.analysis import cost
from tbdkit.cli import app
from tbdkit.report import build_report
from tbdkit.results.index import Index

PAYLOADS = ('<script>alert("{0}")</script>', "<img src=x onerror=alert('{0}')>", '"><svg onload=alert({0})>')
FOLDER_PAYLOAD = "<img src=x onerror=alert(1)>"  # a folder's name holds no "/"


def payload(tag: str, i: int = 0) -> str:
    return PAYLOADS[i % len(PAYLOADS)].format(tag)


class Elements(HTMLParser):
    """Every element and attribute the page declares, as a browser's tokenizer reads them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_data(self, data):
        self.text.append(data)


def injected(html: str) -> list[str]:
    """The elements and attributes of `html` that no template of the report writes."""
    page = Elements()
    page.feed(html)
    written = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "code", "span", "table",
               "tr", "th", "td", "div", "i", "b", "figure", "img", "figcaption", "ul", "li"}
    bad = [tag for tag, _ in page.tags if tag not in written]
    bad += [f"{tag} {name}" for tag, attrs in page.tags for name, _ in attrs if name not in {"lang", "charset", "id",
                                                                                            "class", "src", "alt"}
            and not (tag == "meta" and name in {"name", "content"})]  # the phone viewport's meta
    # the one meta with a name is the viewport the template writes, its content the template's own
    bad += [f"meta {dict(attrs)}" for tag, attrs in page.tags if tag == "meta" and ("name" in dict(attrs))
            and dict(attrs) != {"name": "viewport", "content": "width=device-width, initial-scale=1"}]
    bad += [f"img src={v[:30]}" for tag, attrs in page.tags for n, v in attrs
            if tag == "img" and n == "src" and not (v or "").startswith("data:image/png;base64,")]
    return bad


def page_text(html: str) -> str:
    page = Elements()
    page.feed(html)
    return "".join(page.text)


def _poison(value: object, path: str, tags: dict[str, str], keep: set[str]) -> object:
    """`value` with every string leaf replaced by a payload naming its path (in `tags`)."""
    if isinstance(value, dict):
        return {k: _poison(v, f"{path}.{k}", tags, keep) for k, v in value.items()}
    if isinstance(value, list):
        return [_poison(v, f"{path}[{i}]", tags, keep) for i, v in enumerate(value)]
    if isinstance(value, str) and path not in keep:
        tags.setdefault(path, payload(f"x{len(tags)}", len(tags)))  # one payload per field, in every run
        return tags[path]
    return value


KEEP = {"summary.json.status", "summary.json.started_utc"}  # left valid: the report shows only finished runs


def poisoned_results(root: Path) -> tuple[Path, dict[str, str]]:
    """A results folder whose two runs have every text field, and their folders' names, hostile."""
    results = root / "results"
    tags: dict[str, str] = {}
    for batch, thr in ((2, 10.0), (4, 18.0)):
        run = make_run(results, "deepspeech2", "pytorch", batch, thr, device="cuda:0", device_name="NVIDIA H100",
                       metrics={"gpu_utilization": 50.0, "fp32_utilization": 20.0}, variant="v",
                       memory={"weights": 1, "weight_gradients": 1, "feature_maps": 1, "workspace": 1, "dynamic": 1},
                       kernels=[{"kernel": "k", "calls": 1, "total_time_us": 1.0, "time_share": 1.0,
                                 "mean_time_us": 1.0, "fp32_utilization": 5.0, "method": "fixture"}],
                       started=f"2026-11-22T10:00:0{batch}")
        for name in ("summary.json", "env.json", "spec.json", "memory.json"):
            data = json.loads((run / name).read_text())
            if name == "summary.json":
                data |= {"disturbed_reasons": ["r"],
                         "status": "disturbed" if batch == 2 else "ok",
                         "metrics": {**data["metrics"], "energy": {"value": 1.0, "unit": "J", "method": "m"}}}
            if name == "env.json":
                data["gpu"]["devices"] = [{"name": "n", "uuid": "u"}]
                data["framework"]["device_properties"] = {"uuid": "u"}
            data = _poison(data, name, tags, KEEP)
            if name == "summary.json" and batch == 4:  # its variant and device differ: the page names both runs'
                data |= {"variant": "plain", "device": "cuda:0"}
            if name == "summary.json":  # the paper's framework, so both are drawn (another's run is listed only)
                data |= {"framework": "pytorch"}
            (run / name).write_text(json.dumps(data))
        with (run / "kernels.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["kernel", "calls", "total_time_us", "time_share", "mean_time_us", "fp32_utilization",
                        "tensor_utilization", "method"])
            w.writerow(["sgemm", 1, 1.0, 0.5, 1.0, 80.0, "", "m"])
            w.writerow([payload("kernel"), 1, 1.0, 0.5, 1.0, 5.0, "", payload("kmethod", 1)])  # below the average
        hostile = run.with_name(f"{run.name}{FOLDER_PAYLOAD}")
        run.rename(hostile)
    # a third run whose framework is hostile: listed, never drawn, its name escaped too
    other = shutil.copytree(hostile, results / "20261122-100009-other")
    summary = json.loads((other / "summary.json").read_text())
    tags["summary.json.framework"] = payload("framework")
    (other / "summary.json").write_text(json.dumps(summary | {"framework": tags["summary.json.framework"],
                                                              "run_id": other.name}))
    (results / "index.sqlite").unlink()
    Index(results).rebuild()
    return results, tags


def hostile_prices(root: Path) -> cost.Prices:
    path = root / "prices.toml"
    path.write_text(f'given = "2026-11-01"\ncurrency = {json.dumps(payload("currency", 1))}\n'
                    '[price_per_hour]\n"*" = 2.5\n')
    return cost.load_file(path)


def test_every_text_field_of_a_run_is_escaped_in_report_html(tmp_path, monkeypatch):
    results, tags = poisoned_results(tmp_path)
    monkeypatch.chdir(tmp_path)  # ./prices.toml
    prices = hostile_prices(tmp_path)
    html = build_report(results, tmp_path / "out", prices=prices).read_text()
    assert injected(html) == []
    shown = page_text(html)
    # The fields the page shows (each escaped, so the browser reads it back as the text it was):
    for field in ("summary.json.model", "summary.json.framework", "summary.json.precision", "summary.json.preset",
                  "summary.json.variant", "summary.json.metrics.throughput.unit",
                  "summary.json.disturbed_reasons[0]", "summary.json.data", "summary.json.math_mode",
                  "env.json.cpu.model", "env.json.gpu.devices[0].name", "env.json.gpu.driver_version",
                  "env.json.framework.framework_version", "env.json.kit.version"):
        assert tags[field] in shown, field
    for text in (payload("currency", 1), payload("kernel"), FOLDER_PAYLOAD):
        assert text in shown, text
    assert "&lt;script&gt;" in html and "&lt;img src=x onerror" in html


def test_report_command_escapes_a_hostile_results_folder(tmp_path, monkeypatch):
    """Through the CLI, as a user types it: the results folder's own name is on the page too."""
    results, _ = poisoned_results(tmp_path / FOLDER_PAYLOAD)
    monkeypatch.chdir(tmp_path)
    hostile_prices(tmp_path)
    result = CliRunner().invoke(app, ["report", str(results), "-o", "out"])
    assert result.exit_code == 0, result.output
    html = (tmp_path / "out" / "report.html").read_text()
    assert injected(html) == []
    assert f"{tmp_path / FOLDER_PAYLOAD}" in page_text(html)


hostile_text = st.lists(st.sampled_from(["<", ">", "&", '"', "'", "script", "img", " onerror=", "alert(1)", "/",
                                         "<!--", "]]>", "&lt;", "javascript:", "\u2028", "{{", "}}", "{%"]),
                        min_size=1, max_size=12).map("".join)
SHOWN = [["model"], ["framework"], ["precision"], ["variant"], ["preset"], ["data"], ["metrics", "throughput", "unit"],
         ["math_mode"]]  # on the page as text
FIELDS = [*SHOWN, ["device"], ["run_id"], ["metrics", "throughput", "method"], ["metrics", "gpu_utilization", "reason"],
          ["instability_reason"], ["disturbed_reasons"], ["link_rate"]]


# 8 examples take about 25 s; TBDKIT_FUZZ_EXAMPLES=500 searches harder.
@settings(max_examples=int(os.environ.get("TBDKIT_FUZZ_EXAMPLES", "8")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), text=hostile_text)
def test_fuzzed_summary_text_never_becomes_markup(tmp_path_factory, field, text):
    results = tmp_path_factory.mktemp("fuzz") / "results"
    run = make_run(results, "deepspeech2", "pytorch", 2, 10.0)
    make_run(results, "deepspeech2", "pytorch", 4, 18.0, started="2026-11-22T10:00:01")  # the report names how they differ
    summary = json.loads((run / "summary.json").read_text())
    node = summary
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = [text] if field[-1] == "disturbed_reasons" else text
    (run / "summary.json").write_text(json.dumps(summary))
    html = build_report(results, results.parent / "out").read_text()
    assert injected(html) == []
    if field in SHOWN:
        assert text in page_text(html)  # the text itself, read back from its escaped form
