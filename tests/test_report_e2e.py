"""`tbdkit report` and `tbdkit bundle` end to end, as a user types them, over real CPU runs: the corpus
(tests/corpus/: every run a real run of its stack, MiniGo on PyTorch, TensorFlow and MXNet, standard, compiled,
bf16, data-parallel, disturbed and failed; tests/test_corpus_schema.py fails when a fresh run writes other keys,
columns or units). No run is made here: a sweep's own machinery is tests/test_sweep_cli.py's."""

from __future__ import annotations

import csv
import json
import tarfile

import corpus_runs
from model_checks import tbdkit

from tbdkit.results.summary import MEASURED


def test_report_and_bundle_of_real_runs(tmp_path):
    results, out = tmp_path / "results", tmp_path / "report"
    for role in corpus_runs.roles():  # not indexed: the report indexes the run folders it finds
        corpus_runs.copy(role, results, index=False)
    summaries = {p.name: json.loads((p / "summary.json").read_text()) for p in results.iterdir() if p.is_dir()}
    measured = {run: s for run, s in summaries.items() if s["status"] in MEASURED}
    proc = tbdkit("report", str(results), "--out", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert {r["run_id"] for r in rows} == set(measured)  # every finished run a row, the failed one none
    assert {(r["model"], r["framework"]) for r in rows} == {("minigo", f) for f in ("pytorch", "tensorflow", "mxnet")}
    assert all(float(r["throughput"]) > 0 for r in rows)
    html = (out / "report.html").read_text()
    # On CPU runs: throughput and the memory breakdown are drawn (weights, gradients, feature maps and
    # optimizer state are measured on CPUs too); the GPU figures say why they are not; no claim is decided:
    # the paper's observations are about GPU training, and every one says it needs GPU runs.
    assert (out / "figures" / "fig4_throughput.png").stat().st_size > 5000
    assert (out / "figures" / "fig8_memory.png").stat().st_size > 5000
    assert "GPU compute utilization vs mini-batch size (paper Fig. 5):</b> not drawn" in html
    assert not (out / "figures" / "fig5_gpu_utilization.png").exists()
    assert html.count('class="holds"') + html.count('class="fails"') == 0
    assert "0 hold · 0 do not hold · 12 lack the data to decide" in html
    for n in range(1, 13):
        row = html[html.index(f'id="obs{n}"'):]
        assert "needs GPU runs" in row[:row.index("</tr>")], n
    # like runs are one group (MXNet's standard run and its disturbed twin); precision, graph and workers keep
    # runs apart (PyTorch's fp32, bf16, compiled and 2-worker runs are four groups)
    groups = {(s["framework"], s["precision"], s["graph"], s.get("world_size") or 1) for s in measured.values()}
    assert len(groups) < len(measured) and f"{len(measured)} run(s) in {len(groups)} group(s)" in html
    assert "1 run(s) disturbed" in html and sum(s["status"] == "disturbed" for s in measured.values()) == 1
    bundle = tmp_path / "artifact.tar.gz"
    proc = tbdkit("bundle", str(results), "-o", str(bundle))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile(next(n for n in names if n.endswith("manifest.json"))).read())
    assert manifest["report"]["included"] is True
    assert any(n.endswith("report/report.html") for n in names)
    assert any(n.endswith("report/figures/fig4_throughput.svg") for n in names)
    # every run's summary (the failed one's too; a data-parallel run's workers keep theirs beside it)
    assert {n.split("/")[-2] for n in names if n.endswith("/summary.json") and "/workers/" not in n} == set(summaries)
