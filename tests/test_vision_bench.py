"""`tbdkit bench` end to end for a vision model on this machine's CPU: ResNet-50's smoke preset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too

FAST = ["--preset", "smoke", "--device", "cpu", "--max-warmup-s", "3", "--max-measure-s", "4"]


@pytest.mark.slow
def test_resnet50_smoke_bench_is_ok(tmp_path: Path):
    results = tmp_path / "r"
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "bench", "--model", "resnet50", "--framework", "pytorch",
                           "--batch", "2",
                           *FAST, "--results", str(results)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] in MEASURED and summary["model"] == "resnet50" and summary["batch_size"] == 2
    assert summary["model_info"]["parameters"] == 25_557_032
    thr = summary["metrics"]["throughput"]
    assert thr["unit"] == "images/s" and thr["value"] > 0
    assert summary["metrics"]["sample_throughput"]["value"] == pytest.approx(thr["value"], rel=1e-6)
    assert "synthetic ImageNet-like 64x64 crops" in summary["data_source"]
