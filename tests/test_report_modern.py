"""The report's modern section (tbdkit/report/modern.py) from run folders made by hand: throughput and model
TFLOP/s per GPU, MFU with the other mode's beside it, each FSDP2 rank's shards, what compiling and fp8 bought
against torchtitan's published ratios, and torchtitan's numbers (modern-references.toml) beside ours."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from report_fixtures import make_run
from tbdkit.report import build, modern
from tbdkit.report import runs as runs_mod
from tbdkit.results.index import Index

H100 = "NVIDIA H100 80GB HBM3"
FLOPS_PER_TOKEN = 6 * 8.03e9  # about Llama 3.1 8B's 6N, as the kit's counter records it per unit of work


def llama_8b(results: Path, graph: str, precision: str, tokens: float, started: str, **summary: Any) -> Path:
    """An 8-GPU Llama 3.1 8B run: `tokens` is the job's tokens/s (8 workers)."""
    run = make_run(results, "llama", "pytorch", 1, tokens, device="cuda:0", device_name=H100, world_size=8,
                   precision=precision, preset="paper", variant="8b", started=started)
    path = run / "summary.json"
    doc = json.loads(path.read_text())
    doc["graph"] = graph
    doc["metrics"]["throughput"]["unit"] = "tokens/s"
    doc["metrics"]["model_flops_per_sample"] = {"value": FLOPS_PER_TOKEN * 2048, "unit": "FLOP/sample",
                                                "method": "fixture", "flops_per_work": FLOPS_PER_TOKEN}
    doc["metrics"]["mfu"] = {"value": 25.0, "unit": "%", "method": "fixture", "peak_flops": 989e12,
                             **({"mfu_other": 12.5} if precision == "fp8" else {})}
    doc |= summary
    path.write_text(json.dumps(doc))
    Index(results).add(run)
    return run


def test_the_modern_section_from_runs(tmp_path):
    results = tmp_path / "results"
    shards = {"unit": "bytes", "method": "fixture",
              "ranks": [{"weights": 4 * 2**30, "weight_gradients": 4 * 2**30, "optimizer_state": 8 * 2**30}] * 2}
    llama_8b(results, "standard", "bf16", 8 * 5000.0, "2026-11-22T10:00:00", shard_memory=shards)
    llama_8b(results, "compiled", "bf16", 8 * 6000.0, "2026-11-22T10:10:00")
    llama_8b(results, "compiled", "fp8", 8 * 7500.0, "2026-11-22T10:20:00")
    make_run(results, "vit", "tensorflow", 4, 100.0, memory={"weights": 3 * 2**20, "weight_gradients": 2**20},
             started="2026-11-22T10:30:00")
    make_run(results, "resnet50", "pytorch", 32, 100.0, started="2026-11-22T10:40:00")  # a paper model: not here
    runs = runs_mod.load(results)
    ctx = modern.context(runs)

    rows = {(r[0], r[2], r[3]): r for r in ctx["modern_rows"]}
    assert len(rows) == 4  # the three Llama runs and ViT's, not ResNet-50's
    standard = rows[("llama/pytorch 8b b1", "standard", "bf16")]
    assert standard[1] == f"8 x {H100}" and standard[4] == "5,000 tokens/s"
    assert standard[5] == f"{5000 * FLOPS_PER_TOKEN / 1e12:.3g}"  # 241 TFLOP/s per GPU
    assert standard[7] == ("rank 0: weights 4,096.00, gradients 4,096.00, optimizer state 8,192.00 MiB; "
                           "rank 1: weights 4,096.00, gradients 4,096.00, optimizer state 8,192.00 MiB")
    assert rows[("llama/pytorch 8b b1", "compiled", "fp8")][6] == "25.0 % (12.5 % of the other mode's peak)"
    assert rows[("vit/tensorflow default b4", "standard", "fp32")][7] == "weights 3.0, weight gradients 1.0, peak 4.0 MiB"

    # ours beside torchtitan's Table 1 ratios: 6667 / 5762 compiled, 8532 / 6667 fp8
    comparisons = {r[1]: r for r in ctx["modern_comparison_rows"]}
    assert comparisons["compiled / standard (bf16)"][2:] == ["1.20x", "1.16x"]
    assert comparisons["fp8 / bf16 (compiled)"][2:] == ["1.25x", "1.28x"]
    assert "fp8 / bf16 (standard)" not in comparisons  # no standard fp8 run

    published = {r[0]: r for r in ctx["modern_reference_rows"]}
    assert published["torchtitan: FSDP"][2:4] == ["5,762 tokens/s", f"5,000 ({H100})"]
    assert published["torchtitan: FSDP + torch.compile + Float8"][2:4] == ["8,532 tokens/s", f"7,500 ({H100})"]
    assert all("llama3_h100_202412_torchtitan.md" in r[6] for r in ctx["modern_reference_rows"])
    assert any("2048 tokens" in note for note in ctx["modern_differs"])

    # the built report shows the section in both forms
    out = build.build(results, tmp_path / "report")
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "## Modern workloads" in markdown and "| torchtitan: FSDP | 8 x H100" in markdown
    assert "optimizer state 8,192.00 MiB" in out.html.read_text()


def test_no_modern_run_says_so(tmp_path):
    results = tmp_path / "results"
    make_run(results, "resnet50", "pytorch", 32, 100.0)
    ctx = modern.context(runs_mod.load(results))
    assert ctx["modern_rows"] == [] and ctx["modern_comparison_rows"] == []
    assert all(r[3] == "— (no such GPU run here)" for r in ctx["modern_reference_rows"])
