"""The vision models' frameworks, and one `tbdkit bench` of ResNet-50's smoke preset with its summary read closely
(test_every_cell_benches.py benches the others; tests/test_cross_framework.py compares their frameworks' networks
and outputs). Needs every stack installed (`make test` sets them up)."""

from __future__ import annotations

import json

import pytest

from model_checks import assert_run_holds_together, tbdkit
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too


def test_resnet50_bench_reads_synthetic_crops_and_counts_images(tmp_path):
    """`tbdkit bench` end to end for a vision model on this CPU (MXNet's agent: it benches the fewest other
    models in test_every_cell_benches.py): its table, and its summary (model, batch, units, the synthetic
    data it read, torchvision's parameter count)."""
    results = tmp_path / "r"
    proc = tbdkit("bench", "--model", "resnet50", "--framework", "mxnet", "--preset", "smoke", "--device", "cpu",
                  "--batch", "2", "--max-warmup-s", "1", "--max-measure-s", "2", "--results", str(results))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.count("ResNet-50 v1.5 (smoke preset)") == 1 and "mxnet" in proc.stdout
    (run,) = [p.parent for p in results.glob("*/summary.json")]
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] in MEASURED, s
    assert_run_holds_together(run, s, "resnet50")
    assert s["model_info"]["parameters"] == 25_557_032
    assert s["model"] == "resnet50" and s["batch_size"] == 2 and s["framework"] == "mxnet"
    thr = s["metrics"]["throughput"]
    assert thr["unit"] == "images/s"
    assert s["metrics"]["sample_throughput"]["value"] == pytest.approx(thr["value"], rel=1e-6)
    assert "synthetic ImageNet-like 64x64 crops" in s["data_source"]
