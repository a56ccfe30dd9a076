"""Like with like: runs are grouped by everything that changes the work (runs.SeriesKey), the
figures and the report keep unlike runs apart and say so, and Fig. 7 compares GPUs only."""

from __future__ import annotations

import csv
import json

from tbdkit.report import figures, runs as runs_mod
from report_fixtures import make_run
from model_checks import cli

H100 = dict(device="cuda:0", device_name="NVIDIA H100")
V100 = dict(device="cuda:0", device_name="Tesla V100")


def test_series_key_holds_everything_that_changes_the_work(tmp_path):
    base = dict(**H100)
    make_run(tmp_path, "resnet50", "pytorch", 8, 10.0, **base)
    make_run(tmp_path, "resnet50", "pytorch", 16, 20.0, **base)                       # same series, other batch
    make_run(tmp_path, "resnet50", "pytorch", 8, 11.0, preset="paper", **base)
    make_run(tmp_path, "resnet50", "pytorch", 8, 12.0, variant="resnet101", **base)
    make_run(tmp_path, "resnet50", "pytorch", 8, 13.0, data="/data/imagenet", started="2026-11-22T10:01:00", **base)
    make_run(tmp_path, "resnet50", "pytorch", 8, 14.0, precision="amp", started="2026-11-22T10:02:00", **base)
    make_run(tmp_path, "resnet50", "pytorch", 8, 15.0, **V100)
    make_run(tmp_path, "resnet50", "pytorch", 8, 16.0, world_size=2, nodes=2, **base)
    make_run(tmp_path, "resnet50", "pytorch", 8, 17.0, world_size=2, nodes=1, **base)
    runs = runs_mod.load(tmp_path)
    groups = runs_mod.by_series(runs, multi_worker=True)
    assert len(groups) == 8 and sorted(len(v) for v in groups.values()) == [1] * 7 + [2]
    single = runs_mod.by_series(runs)
    assert len(single) == 6  # single-worker lines only
    g = runs_mod.grouping(runs)
    assert g.groups == 8 and len(g.kept_apart) == 1
    why = g.kept_apart[0]
    for part in ("preset (paper, smoke)", "variant (default, resnet101)", "data source (/data/imagenet, synthetic)",
                 "precision (amp, fp32)", "device (NVIDIA H100, Tesla V100)", "nodes (1, 2)", "workers per node (1, 2)"):
        assert part in why, (part, why)


def test_a_run_without_the_fields_is_not_assumed_alike(tmp_path):
    run = make_run(tmp_path, "resnet50", "pytorch", 8, 10.0, **H100)
    make_run(tmp_path, "resnet50", "pytorch", 16, 20.0, **H100)
    summary = json.loads((run / "summary.json").read_text())
    for key in ("preset", "data"):
        summary.pop(key)
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "spec.json").write_text(json.dumps({"model": "resnet50"}))
    keys = {r.series for r in runs_mod.load(tmp_path)}
    assert len(keys) == 2 and {k.preset for k in keys} == {"smoke", runs_mod.UNRECORDED}


def test_fig4_draws_one_line_per_preset_with_labels_that_tell_them_apart(tmp_path):
    for preset, scale in (("smoke", 1.0), ("paper", 2.0)):
        for batch in (8, 16):
            make_run(tmp_path, "resnet50", "pytorch", batch, scale * batch, preset=preset, **H100)
    drawn = figures.throughput_vs_batch(runs_mod.load(tmp_path))
    assert isinstance(drawn, figures.Figure)
    labels = sorted(t.get_text() for t in drawn.figure.axes[0].get_legend().get_texts())
    assert labels == ["pytorch fp32 paper", "pytorch fp32 smoke"]


def test_fig7_compares_gpus_on_three_metrics_and_never_takes_a_cpu_as_baseline(tmp_path):
    make_run(tmp_path, "resnet50", "pytorch", 8, 5.0)  # a CPU run: sorts first by name ("CPU: ...")
    make_run(tmp_path, "resnet50", "pytorch", 8, 100.0, metrics={"gpu_utilization": 90.0, "fp32_utilization": 40.0}, **H100)
    missing = figures.across_devices(runs_mod.load(tmp_path))
    assert isinstance(missing, figures.Missing) and "1 GPU(s)" in missing.reason and "CPU run" in missing.reason
    make_run(tmp_path, "resnet50", "pytorch", 8, 50.0, metrics={"gpu_utilization": 95.0, "fp32_utilization": 60.0}, **V100)
    make_run(tmp_path, "resnet50", "pytorch", 8, 500.0, preset="paper", **V100)  # unlike: not compared
    drawn = figures.across_devices(runs_mod.load(tmp_path))
    assert isinstance(drawn, figures.Figure) and "CPU" not in drawn.caption and "NVIDIA H100" in drawn.caption
    axes = drawn.figure.axes
    assert [ax.get_title() for ax in axes] == ["throughput", "GPU utilization", "FP32 utilization"]
    heights = [[round(b.get_height(), 3) for b in ax.patches] for ax in axes]
    assert heights == [[1.0, 0.5], [1.0, round(95 / 90, 3)], [1.0, 1.5]]


def test_report_keeps_smoke_and_paper_runs_of_one_model_apart(tmp_path):
    results, out = tmp_path / "results", tmp_path / "report"
    for preset, values in (("smoke", (10.0, 19.0)), ("paper", (30.0, 58.0))):
        for batch, thr in zip((8, 16), values):
            make_run(results, "resnet50", "pytorch", batch, thr, preset=preset, **H100)
    proc = cli("report", str(results), "--out", str(out))
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in text, text
    assert "4 run(s) in 2 group(s)" in text and "resnet50/pytorch into 2 groups by preset (paper, smoke)" in text
    html = (out / "report.html").read_text()
    assert "resnet50/pytorch into 2 groups by preset (paper, smoke)" in html
    obs1 = html[html.index('id="obs1"'):html.index('id="obs2"')]
    assert "[smoke, synthetic data]" in obs1 and "[paper, synthetic data]" in obs1 and 'class="holds"' in obs1
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert sorted(r["preset"] for r in rows) == ["paper", "paper", "smoke", "smoke"]


def test_report_over_cpu_only_results_decides_no_gpu_claim(tmp_path):
    results, out = tmp_path / "results", tmp_path / "report"
    for batch in (2, 4, 8):
        make_run(results, "deepspeech2", "pytorch", batch, 5.0 * batch,
                 memory={"weights": 10, "weight_gradients": 10, "feature_maps": 70 * batch, "workspace": 1, "dynamic": 1})
    proc = cli("report", str(results), "--out", str(out))
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert text.count("needs GPU runs") == 12 and "holds" not in text
    html = (out / "report.html").read_text()
    assert 'class="holds"' not in html and 'class="fails"' not in html
    assert "0 hold · 0 do not hold · 12 lack the data to decide" in html


def test_one_gpu_is_one_device_whatever_the_framework_calls_it(tmp_path):
    """MXNet names its GPU "gpu(0)"; PyTorch and TensorFlow give the product name: the device of a
    series is NVML's product name, so the frameworks' runs on one GPU are compared (Obs. 3)."""
    nvml = {"available": True, "driver_version": "580.1",
            "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-abc"}]}
    for fw, named in (("mxnet", "gpu(0)"), ("tensorflow", "NVIDIA H100 80GB HBM3"), ("pytorch", "NVIDIA H100 80GB HBM3")):
        run = make_run(tmp_path, "resnet50", fw, 32, 100.0, device="cuda:0", device_name=named)
        env = json.loads((run / "env.json").read_text())
        env["gpu"] = nvml
        (run / "env.json").write_text(json.dumps(env))
    assert {r.device_name for r in runs_mod.load(tmp_path)} == {"NVIDIA H100 80GB HBM3"}
