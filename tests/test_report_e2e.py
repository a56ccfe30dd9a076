"""The report end to end on this machine's CPU: small sweeps over two models and two frameworks
(Deep Speech 2 and ResNet-50 on PyTorch and MXNet, the quickest stack to start), then `tbdkit report` over its results
and `tbdkit bundle` with that report inside."""

from __future__ import annotations

import csv
import json
import shutil
import tarfile

import pytest

from model_checks import tbdkit

FAST = ["--preset", "smoke", "--device", "cpu", "--max-warmup-s", "2", "--max-measure-s", "3", "--cv-limit", "0.5"]


def test_sweep_report_bundle(small_sweep, tmp_path):
    results, out = tmp_path / "results", tmp_path / "report"
    # Deep Speech 2 on PyTorch at batches 1 and 2 is the session's small sweep (same caps): a copy of it
    # (the index is rebuilt from the run folders), then the other three model x framework pairs
    assert small_sweep[1].returncode == 0, small_sweep[1].stdout[-3000:] + small_sweep[1].stderr[-3000:]
    shutil.copytree(small_sweep[0], results, ignore=shutil.ignore_patterns("index.sqlite*"))
    for model, frameworks in (("deepspeech2", "mxnet"), ("resnet50", "pytorch,mxnet")):
        proc = tbdkit("sweep", model, "--frameworks", frameworks, "--batch", "1,2", *FAST, "--results", str(results),
                      timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = tbdkit("report", str(results), "--out", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert {(r["model"], r["framework"]) for r in rows} == {
        (m, f) for m in ("deepspeech2", "resnet50") for f in ("pytorch", "mxnet")}
    assert all(float(r["throughput"]) > 0 for r in rows) and len(rows) == 8
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
    assert "8 run(s) in 4 group(s)" in html  # two models x two frameworks, batches 1 and 2 in each
    bundle = tmp_path / "artifact.tar.gz"
    proc = tbdkit("bundle", str(results), "-o", str(bundle))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile(next(n for n in names if n.endswith("manifest.json"))).read())
    assert manifest["report"]["included"] is True
    assert any(n.endswith("report/report.html") for n in names)
    assert any(n.endswith("report/figures/fig4_throughput.svg") for n in names)
    assert sum(n.endswith("summary.json") for n in names) == 8
