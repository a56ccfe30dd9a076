"""`tbdkit report`: claim checks that hold, fail and lack data; figures drawn or refused with a
reason; the HTML, Markdown and CSV it writes; and report.html rendered in headless Chromium."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tbdkit.core import paths
from tbdkit.report import build_report, claims, figures, runs as runs_mod
from report_fixtures import make_run

MiB = 2**20


def load(results: Path) -> list[runs_mod.Run]:
    return runs_mod.load(results)


def verdict(results: Path, check) -> claims.Verdict:
    return check(load(results))


def test_gpu_claims_decide_on_gpu_runs(tmp_path):
    h100 = dict(device="cuda:0", device_name="NVIDIA H100", peak_flops=67e12)
    for batch, util, fp32 in ((16, 80.0, 30.0), (32, 96.0, 45.0)):
        make_run(tmp_path, "seq2seq", "pytorch", batch, 10.0 * batch, metrics={"gpu_utilization": util - 30, "fp32_utilization": fp32 / 3}, **h100)
        make_run(tmp_path, "transformer", "pytorch", batch, 10.0 * batch, metrics={"gpu_utilization": util, "fp32_utilization": fp32}, **h100)
        make_run(tmp_path, "transformer", "pytorch", batch, 5.0 * batch, device="cuda:0", device_name="Tesla V100",
                 peak_flops=15.7e12, metrics={"gpu_utilization": util + 2, "fp32_utilization": fp32 + 5})
    runs = load(tmp_path)
    assert claims.obs4_gpu_util_rises(runs).verdict == claims.HOLDS
    assert claims.obs5_lstm_low_util(runs).verdict == claims.HOLDS
    assert claims.obs6_fp32_util_rises(runs).verdict == claims.HOLDS
    assert claims.obs7_rnn_low_fp32(runs).verdict == claims.HOLDS
    v9 = claims.obs9_faster_gpu_lower_util(runs)
    assert v9.verdict == claims.HOLDS and "NVIDIA H100" in v9.evidence[0]


def test_obs8_kernel_table_below_average(tmp_path):
    kernels = [{"kernel": "sgemm_big", "time_share": 0.50, "fp32_utilization": 80.0},
               {"kernel": "bn_fw_kernel", "time_share": 0.10, "fp32_utilization": 20.0},
               {"kernel": "relu_kernel", "time_share": 0.01, "fp32_utilization": 5.0}]
    run = make_run(tmp_path, "resnet50", "pytorch", 32, 100.0, device="cuda:0", device_name="NVIDIA H100", kernels=kernels)
    (r,) = load(tmp_path)
    rows = claims.long_kernels_below_average(r)
    assert [k["kernel"] for k in rows] == ["bn_fw_kernel", "relu_kernel"]
    assert rows[0]["average_fp32"] == pytest.approx((0.5 * 80 + 0.1 * 20 + 0.01 * 5) / 0.61)
    assert claims.obs8_long_low_kernels([r]).verdict == claims.HOLDS
    assert run.is_dir()


def test_figures_drawn_or_refused_with_reasons(tmp_path):
    for batch in (2, 4):
        make_run(tmp_path, "deepspeech2", "pytorch", batch, 5.0 * batch)
        make_run(tmp_path, "deepspeech2", "tensorflow", batch, 4.0 * batch)
    runs = load(tmp_path)
    assert isinstance(figures.throughput_vs_batch(runs), figures.Figure)
    gpu = figures.gpu_utilization_vs_batch(runs)
    assert isinstance(gpu, figures.Missing) and "no GPU" in gpu.reason
    assert isinstance(figures.fp32_utilization_vs_batch(runs), figures.Missing)
    assert "0 GPU(s)" in figures.across_devices(runs).reason
    assert "no memory.json" in figures.memory_breakdown(runs).reason
    assert "no multi-worker run" in figures.scaling(runs).reason


def test_training_curves_come_from_converge_runs(tmp_path):
    make_run(tmp_path, "resnet50", "pytorch", 4, 10.0)
    missing = figures.training_curves(load(tmp_path))
    assert isinstance(missing, figures.Missing) and "no converge run" in missing.reason
    run = make_run(tmp_path, "resnet50", "pytorch", 32, 10.0, started="2026-11-22T11:00:00")
    summary = json.loads((run / "summary.json").read_text())
    summary.update(preset="converge", convergence={"target": 0.95, "quality_metric": "top-1 accuracy"})
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "convergence.csv").write_text("wall_s,train_s,step,samples,loss,quality\n1,0,0,0,,0.1\n40,30,90,2880,0.4,0.96\n")
    drawn = figures.training_curves(load(tmp_path))
    assert isinstance(drawn, figures.Figure)
    (line,) = [ln for ln in drawn.figure.axes[0].get_lines() if ln.get_marker() == "."]
    assert list(line.get_xdata()) == [0.0, 30.0] and list(line.get_ydata()) == [0.1, 0.96]


def full_fixture(results: Path) -> None:
    h100 = dict(device="cuda:0", device_name="NVIDIA H100")
    for batch in (8, 16, 32):
        mem = {"weights": 98 * MiB, "weight_gradients": 98 * MiB, "feature_maps": 60 * MiB * batch, "workspace": 20 * MiB,
               "dynamic": 98 * MiB}
        for fw, scale in (("pytorch", 1.0), ("tensorflow", 0.8)):
            make_run(results, "resnet50", fw, batch, 40.0 * batch * scale, memory=mem, **h100,
                     metrics={"gpu_utilization": 70 + batch / 2, "gpu_utilization_trace": 60 + batch / 2,
                              "fp32_utilization": 30 + batch / 4, "tensor_utilization": 0.0},
                     kernels=[{"kernel": "sgemm", "time_share": 0.6, "fp32_utilization": 70.0},
                              {"kernel": "bn_fw", "time_share": 0.2, "fp32_utilization": 15.0}])
            make_run(results, "deepspeech2", fw, batch, 3.0 * batch * scale, started="2026-11-22T11:00:00")
    make_run(results, "resnet50", "pytorch", 8, 100.0, device="cuda:0", device_name="Tesla V100",
             metrics={"gpu_utilization": 90.0, "fp32_utilization": 50.0})
    make_run(results, "resnet50", "pytorch", 8, 600.0, world_size=2, nodes=2, **h100)


@pytest.fixture(scope="module")
def full_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """full_fixture's runs and their report, built once for the tests that read it: (results, report folder,
    report.html as build_report returned it)."""
    root = tmp_path_factory.mktemp("full")
    results, out = root / "results", root / "report"
    full_fixture(results)
    return results, out, build_report(results, out)


def test_build_report_writes_html_md_csv_and_figures(full_report):
    results, out, html = full_report
    assert html == out / "report.html"
    text = html.read_text()
    assert text.count('src="data:image/png;base64,') == 6  # every figure has data here
    assert "http://" not in text and "https://" not in text  # self-contained
    for n in range(1, 13):
        assert f'id="obs{n}"' in text
    assert "magma_lds128_sgemm_kernel" in text and "bn_fw" in text  # paper's Table V and ours
    for key in ("fig4_throughput", "fig5_gpu_utilization", "fig6_fp32_utilization", "fig7_devices", "fig8_memory",
                "fig9_scaling"):
        assert (out / "figures" / f"{key}.png").stat().st_size > 5000
        assert (out / "figures" / f"{key}.svg").read_text().lstrip().startswith("<?xml")
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert len(rows) == len(list(p for p in results.iterdir() if p.is_dir()))
    assert {r["model"] for r in rows} == {"resnet50", "deepspeech2"}
    md = (out / "report.md").read_text()
    assert md.index("observations") < md.index("## Figures") and "![Throughput" in md
    assert "NVIDIA H100" in md and "580.1" in md  # environment section


def test_report_cli_errors_are_one_sentence(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "report", str(tmp_path / "nowhere"), "-o", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stdout + proc.stderr
    assert "No results folder" in proc.stdout + proc.stderr


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_html_renders_in_headless_chromium(full_report):
    browser = chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs Debian's chromium for this test")
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    html = full_report[2]
    problems: list[str] = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=browser, args=["--no-sandbox"])
        page = b.new_page()
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)")
        claims_rows = page.eval_on_selector_all("#claims + p + table tr", "rows => rows.length")
        title = page.title()
        b.close()
    assert problems == []
    assert len(widths) == 6 and all(w > 300 for w in widths), widths
    assert claims_rows == 13 and title.startswith("tbdkit report")


def test_fig9_draws_a_panel_per_framework_with_tensorflow_and_mxnet_jobs(tmp_path):
    """The paper's Fig. 9 cells: Inception-v3 on TensorFlow and ResNet-50 on MXNet, one machine and
    two over a 1 Gbit/s link; PyTorch's panel says it has no job."""
    make_run(tmp_path, "inception_v3", "tensorflow", 8, 3.0)
    make_run(tmp_path, "inception_v3", "tensorflow", 8, 5.0, world_size=2, nodes=2, link_rate="1gbit")
    make_run(tmp_path, "resnet50", "mxnet", 8, 5.0)
    make_run(tmp_path, "resnet50", "mxnet", 8, 8.5, world_size=2, nodes=2)
    drawn = figures.scaling(load(tmp_path))
    assert isinstance(drawn, figures.Figure)
    panels = {ax.get_title(): ax for ax in drawn.figure.axes if ax.get_visible()}
    assert list(panels) == ["pytorch", "tensorflow", "mxnet"]
    assert panels["pytorch"].get_lines() == [] and "no multi-worker pytorch run" in panels["pytorch"].texts[0].get_text()
    (tf_line,) = panels["tensorflow"].get_lines()
    assert list(tf_line.get_xdata()) == [1, 2] and list(tf_line.get_ydata()) == [3.0, 5.0]
    assert "link 1gbit" in tf_line.get_label()
    (mx_line,) = panels["mxnet"].get_lines()
    assert list(mx_line.get_xdata()) == [1, 2] and list(mx_line.get_ydata()) == [5.0, 8.5]


def test_the_reference_sentence_names_each_models_folder(tmp_path, monkeypatch):
    """No committed reference: the sentence names workloads/<model>/reference/ with the model in it, in the
    HTML as in the Markdown (a `<model>` placeholder read as an HTML tag printed `workloads//reference/`)."""
    workloads = tmp_path / "workloads"
    monkeypatch.setattr(paths, "KIT_WORKLOADS", workloads)
    make_run(tmp_path / "results", "resnet50", "pytorch", 8, 100.0)
    make_run(tmp_path / "results", "deepspeech2", "pytorch", 2, 10.0)
    html = build_report(tmp_path / "results", tmp_path / "out").read_text()
    md = (tmp_path / "out" / "report.md").read_text()
    for text in (html, md):
        assert f"{workloads}/deepspeech2/reference, {workloads}/resnet50/reference hold none for them yet" in text
        assert "//reference" not in text and "<model>" not in text


def test_a_point_without_an_error_bar_is_marked(tmp_path):
    """A single run whose window had one iteration records no 95% CI: its point in the throughput figure is
    marked (×, the caption says why) rather than drawn as if its error bar were zero."""
    results = tmp_path / "results"
    make_run(results, "deepspeech2", "pytorch", 2, 10.0)
    bare = make_run(results, "deepspeech2", "pytorch", 4, 18.0)
    summary = json.loads((bare / "summary.json").read_text())
    summary["metrics"]["throughput"].update(ci95_half_width=None, ci95_relative=None)
    summary["window"] = {"iterations": 1, "seconds": 0.1, "stop_reason": "time_cap"}
    (bare / "summary.json").write_text(json.dumps(summary))
    fig = figures.throughput_vs_batch(load(results))
    assert isinstance(fig, figures.Figure) and "×: a single run without a 95% CI" in fig.caption
    (ax,) = fig.figure.axes
    marks = [c for c in ax.collections if c.get_gid() == figures.NO_ERROR_BAR]
    assert len(marks) == 1 and marks[0].get_offsets().tolist() == [[4.0, 18.0]]
    build_report(results, tmp_path / "out")
    assert f'id="{figures.NO_ERROR_BAR}' in (tmp_path / "out" / "figures" / "fig4_throughput.svg").read_text()


def test_the_sweep_table_says_when_every_repeat_was_disturbed():
    from rich.console import Console

    from tbdkit.cli.sweep import grid_table

    points = {f"pytorch/fp32/b2/r{i}": {"framework": "pytorch", "precision": "fp32", "batch": 2, "status": "disturbed"}
              for i in range(2)}
    state = {"sweep_id": "s", "points": points,
             "spec": {"model": "deepspeech2", "preset": "smoke", "repeat": 2, "cv_limit": 0.05,
                      "batches": [2], "frameworks": ["pytorch"], "precisions": ["fp32"]},
             "groups": {"pytorch/fp32/b2": {"throughput_mean": 10.0, "throughput_stdev": 0.1, "throughput_cv": 0.01,
                                            "batch": 2, "batch_size": 2}}}
    console = Console(width=250, record=True)
    console.print(grid_table(state, "audio_s/s"))
    text = " ".join(console.export_text().split())
    assert "ok repeats" not in text and "all 2 disturbed" in text
    assert "mean over the repeats that finished, ok or disturbed" in text
