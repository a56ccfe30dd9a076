"""The one-command reference run: it refuses without a GPU, picks two batch sizes, and its ncu
pass parses and merges a profile (a stand-in ncu script replays the fixture CSV)."""

from __future__ import annotations

import ast
import csv
import json
import os
import shutil
import sqlite3
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from report_fixtures import make_run
from tbdkit.analysis import ncu
from tbdkit.bench import reference
from tbdkit.spec import run_spec as specs
from tbdkit.analysis.peak import Device
from tbdkit.core.errors import UserError
from tbdkit.core.paths import KIT_ROOT
from tbdkit.report import reference_table

FIXTURE = Path(__file__).parent / "fixtures" / "ncu" / "raw_page.csv"


def test_refuses_without_a_gpu(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(reference, "gpu_count", lambda: 0)
    with pytest.raises(UserError, match="NVIDIA GPU"):
        reference.reference(["deepspeech2"], tmp_path, "fp32", 1, 1, 1, 1, True)
    assert reference.main(["--model", "resnet50", "--results", str(tmp_path)]) == 2
    assert not any(tmp_path.iterdir())


def test_two_batch_sizes_are_the_default_and_the_one_below() -> None:
    assert reference.two_batches("deepspeech2") == [16, 32]
    assert reference.two_batches("resnet50") == [32, 64]
    # Faster R-CNN's paper preset is 1 image per GPU only, as the paper trained it: one size.
    assert reference.two_batches("faster_rcnn") == [1]
    assert all(len(reference.two_batches(m)) == 2 for m in reference.suite() if m != "faster_rcnn")


def test_the_suite_is_every_pytorch_model() -> None:
    from tbdkit.spec import catalog

    assert reference.suite() == sorted(m for m, model in catalog.models().items() if "pytorch" in model.frameworks)
    assert {"llama", "vit", "dit", "deepspeech2"} <= set(reference.suite())
    assert set(reference.MODELS) <= set(reference.suite())


def _third_party_imports(path: Path) -> set[str]:
    """Root modules a workload file imports when loaded (module level; a reader's lazy imports, such
    as soundfile or PIL for real data, are not needed by the synthetic reference runs), less the
    standard library and the workloads' own modules (_shared, ...)."""
    roots = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    local = {p.stem for p in path.parent.parent.glob("*")} | {p.stem for p in path.parent.glob("*.py")}
    return {r for r in roots if r not in sys.stdlib_module_names and r not in local and r != "__future__"}


@pytest.mark.parametrize("model", reference.suite())
def test_the_reference_python_is_checked_for_every_module_a_workload_imports(model: str) -> None:
    """A GPU machine's Python is probed for these before anything runs; a workload importing a module
    the probe does not know would fail minutes into the suite instead."""
    folder = KIT_ROOT / "workloads" / model
    imported = set().union(*(_third_party_imports(folder / f) for f in ("pytorch.py", "data.py")))
    assert imported <= set(reference.needs([model])), sorted(imported - set(reference.needs([model])))


def test_missing_modules_are_named_with_their_pip_names(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(reference, "gpu_count", lambda: 1)
    monkeypatch.setattr(reference, "agent_python", lambda: sys.executable)  # the kit's venv: no torch, no ale-py
    with pytest.raises(UserError) as err:
        reference.reference(["a3c"], tmp_path, "fp32", 1, 1, 1, 1, False)
    text = str(err.value)
    assert "torch" in text and "ale_py" in text and "pip install" in text and " ale-py" in text
    assert not any(tmp_path.iterdir())


def _reference_run(workloads: Path, model: str, batch: int, thr: float, **kw: Any) -> Path:
    run = make_run(workloads.parent / "scratch", model, "pytorch", batch, thr, device="cuda:0",
                   device_name="NVIDIA H100 80GB HBM3", **kw)
    dest = workloads / model / "reference" / f"b{batch}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    return Path(shutil.move(run, dest))


def test_reference_table_lists_the_committed_runs(tmp_path) -> None:
    workloads = tmp_path / "workloads"
    assert reference_table.markdown(workloads) == reference_table.NONE_YET
    _reference_run(workloads, "resnet50", 64, 2875.5, metrics={"gpu_utilization": 97.0, "fp32_utilization": 41.25},
                   memory={"weights": 2**30, "weight_gradients": 2**30, "feature_maps": 2**31})
    _reference_run(workloads, "resnet50", 32, 2500.0)
    _reference_run(workloads, "deepspeech2", 32, 410.0, metrics={"gpu_utilization": 91.0})
    lines = reference_table.markdown(workloads).splitlines()
    assert lines[0].startswith("| model | batch |") and len(lines) == 2 + 3
    assert [line.split(" | ")[:2] for line in lines[2:]] == [["| deepspeech2", "32"], ["| resnet50", "32"],
                                                               ["| resnet50", "64"]]
    big = lines[4].split(" | ")
    assert big[3] == "NVIDIA H100 80GB HBM3" and big[4] == "2,876 samples/s ±1.0%"
    assert big[5] == "97" and big[8] == "41.2" and big[11] == "4"   # NVML util, ncu FP32, peak GiB
    assert lines[3].split(" | ")[5] == "—"                         # not measured: a dash, never a number


def test_readme_table_is_written_between_the_markers(tmp_path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# kit\n\n{reference_table.BEGIN}\nold table\n{reference_table.END}\n\nafter\n")
    reference_table.write_readme(readme, "| new |")
    assert readme.read_text() == f"# kit\n\n{reference_table.BEGIN}\n| new |\n{reference_table.END}\n\nafter\n"
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="markers"):
        reference_table.write_readme(readme, "| new |")


def test_the_readme_shows_the_committed_reference_results() -> None:
    """README's table is generated from workloads/*/reference/: after committing a reference run,
    `make reference-table` must be run (this fails until it is)."""
    text = (KIT_ROOT / "README.md").read_text()
    between = text.split(reference_table.BEGIN, 1)[1].split(reference_table.END, 1)[0]
    assert between.strip() == reference_table.markdown(KIT_ROOT / "workloads")


def fake_ncu(tmp_path: Path, query: Path | None = None) -> Path:
    """Replays the fixture CSV on --import, `query` on --query-metrics (none: it fails, as an ncu that cannot
    list them); otherwise records its arguments and touches the report."""
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir()
    exe.write_text(f"""#!/bin/sh
case " $* " in
  *" --import "*) cat {FIXTURE} ;;
  *" --query-metrics "*) {f"cat {query}" if query else "exit 1"} ;;
  *) echo "$*" > {tmp_path}/ncu-args; while [ "$1" != "--export" ]; do shift; done; touch "$2.ncu-rep" ;;
esac
""")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def ncu_run_dir(monkeypatch, tmp_path: Path, timeline: str | None, query: Path | None = None) -> Path:
    monkeypatch.setenv("PATH", f"{fake_ncu(tmp_path, query).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(reference, "agent_python", lambda: "python3")
    monkeypatch.setattr(reference, "device_from_env", lambda env: Device("H100", "9.0", 132, 1980.0, "fixture"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "env.json").write_text(json.dumps({"framework": {}}))
    with (run_dir / "kernels.csv").open("w") as f:
        f.write("kernel,calls,total_time_us,time_share,mean_time_us,fp32_utilization,tensor_utilization,method\n"
                "ampere_sgemm_128x64_nn,10,500.0,0.8,50.0,,,trace\nother_kernel,4,125.0,0.2,31.25,,,trace\n")
    if timeline is not None:
        (run_dir / "kernel_launches.csv").write_text(timeline)
    return run_dir


# constructed: the run's timeline (not recorded): sgemm 10 calls in the sampled configuration, a kernel
# ncu did not sample taking the other 20% of the kernel time
TIMELINE_CSV = ("kernel,launch,calls,total_time_us,method\n"
                "ampere_sgemm_128x64_nn,grid=64x8x1 block=256x1x1,10,10000.0,trace\n"
                "other_kernel,grid=1x1x1 block=32x1x1,4,2500.0,trace\n")


def test_ncu_pass_weights_samples_by_the_timeline_and_merges(monkeypatch, tmp_path) -> None:
    run_dir = ncu_run_dir(monkeypatch, tmp_path, TIMELINE_CSV)
    spec = specs.build(model="deepspeech2", framework="pytorch", batch_size=4, preset="smoke", device="cpu")
    got = reference.ncu_pass(spec, run_dir, iterations=3, launch_count=3)
    peak = 132 * 1980e6 * 128 * 2
    # sgemm's two samples: (33.45e9 + 66.9e9) / 2 FLOPs per launch, 10 launches in 10 ms: 75%
    assert got["fp32_utilization"]["value"] == pytest.approx(100 * 10 * 50.175e9 / (peak * 10e-3), rel=1e-6)
    assert got["fp32_utilization"]["value"] == pytest.approx(75.0, abs=0.02)
    assert got["fp32_utilization"]["kernels_profiled"] == 4
    assert got["fp32_utilization"]["coverage"] == pytest.approx(0.8)
    assert "80.0%" in got["fp32_utilization"]["note"]
    assert got["tensor_utilization"]["value"] == 0.0
    args = (tmp_path / "ncu-args").read_text().split()
    assert args[args.index("--filter-mode") + 1] == "per-launch-config"
    assert args[args.index("--launch-count") + 1] == "3"
    rows = {r["kernel"]: r for r in csv.DictReader((run_dir / "kernels.csv").open())}
    assert float(rows["ampere_sgemm_128x64_nn"]["fp32_utilization"]) == pytest.approx(
        100 * 10 * 50.175e9 / (peak * 10e-3), rel=1e-4)
    assert rows["other_kernel"]["fp32_utilization"] == ""
    assert (run_dir / "ncu_raw.csv").read_text() == FIXTURE.read_text()


def test_ncu_pass_leaves_out_a_metric_this_gpu_lacks_and_keeps_the_rest(monkeypatch, tmp_path) -> None:
    """One unknown metric no longer fails the whole pass: ncu --query-metrics says which this GPU has."""
    run_dir = ncu_run_dir(monkeypatch, tmp_path, TIMELINE_CSV, FIXTURE.parent / "query_metrics.txt")
    spec = specs.build(model="deepspeech2", framework="pytorch", batch_size=4, preset="smoke", device="cpu")
    got = reference.ncu_pass(spec, run_dir, iterations=3, launch_count=3)
    args = (tmp_path / "ncu-args").read_text().split()
    assert ncu.TENSOR not in args[args.index("--metrics") + 1] and ncu.FFMA in args[args.index("--metrics") + 1]
    assert got["fp32_utilization"]["value"] == pytest.approx(75.0, abs=0.02)
    assert got["tensor_utilization"]["value"] is None
    assert "does not list sm__pipe_tensor_cycles_active" in got["tensor_utilization"]["reason"]


def test_ncu_pass_without_a_timeline_is_null_with_reason(monkeypatch, tmp_path) -> None:
    run_dir = ncu_run_dir(monkeypatch, tmp_path, None)
    spec = specs.build(model="deepspeech2", framework="pytorch", batch_size=4, preset="smoke", device="cpu")
    got = reference.ncu_pass(spec, run_dir, 3, 3)
    assert got["fp32_utilization"]["value"] is None and "kernel_launches.csv" in got["fp32_utilization"]["reason"]


def test_ncu_pass_without_ncu_is_null_with_reason(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(reference, "find_ncu", lambda: None)
    spec = specs.build(model="deepspeech2", framework="pytorch", batch_size=4, preset="smoke", device="cpu")
    got = reference.ncu_pass(spec, tmp_path, 1, 10)
    assert got["fp32_utilization"]["value"] is None and "not installed" in got["fp32_utilization"]["reason"]


def test_readme_without_markers_is_one_clear_error(monkeypatch, tmp_path, capsys) -> None:
    (tmp_path / "README.md").write_text("# a README whose table markers were deleted\n")
    monkeypatch.setattr(reference, "KIT_ROOT", tmp_path)
    assert reference.main(["--table", "--readme"]) == 2
    err = capsys.readouterr().err
    assert "lacks the reference-table markers" in err and "put the two marker lines back" in err
    assert (tmp_path / "README.md").read_text() == "# a README whose table markers were deleted\n"


def test_an_existing_disturbed_run_is_profiled_in_place_and_says_so(monkeypatch, tmp_path) -> None:
    """`tbdkit reference --run DIR`: the ncu pass over a run already measured, with its warm-up and timeout as
    given; a disturbed run is profiled too, and its metrics say it was disturbed."""
    run_dir = ncu_run_dir(monkeypatch, tmp_path, TIMELINE_CSV)
    monkeypatch.setattr(reference, "gpu_count", lambda: 1)
    spec = specs.build(model="resnet50", framework="pytorch", batch_size=64, preset="paper", device="cuda")
    (run_dir / "spec.json").write_text(spec.model_dump_json())
    (run_dir / "summary.json").write_text(json.dumps({"status": "disturbed", "metrics": {"throughput": {"value": 1}},
                                                      "disturbed_reasons": ["another process on the GPU (pid 7)"]}))
    timeouts = []
    real = reference.run_agent
    monkeypatch.setattr(reference, "run_agent", lambda *a, timeout_s: timeouts.append(timeout_s) or real(
        *a, timeout_s=timeout_s))
    assert reference.main(["--run", str(run_dir), "--profile-iterations", "1", "--launch-count", "1",
                           "--ncu-warmup-s", "7", "--ncu-timeout-s", "33"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    fp32 = summary["metrics"]["fp32_utilization"]
    assert fp32["value"] is not None and "ended disturbed (another process on the GPU (pid 7))" in fp32["note"]
    assert summary["metrics"]["throughput"] == {"value": 1} and summary["status"] == "disturbed"
    assert timeouts == [33.0] and json.loads((run_dir / "ncu" / "spec.json").read_text())["measure"]["max_warmup_s"] == 7
    args = (tmp_path / "ncu-args").read_text().split()
    assert args[args.index("--launch-count") + 1] == "1"
    assert not any((KIT_ROOT / "workloads" / "resnet50" / "reference").glob("*/ncu"))  # nothing copied


def test_a_run_that_failed_or_is_not_a_gpu_pytorch_run_is_refused(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(reference, "gpu_count", lambda: 1)
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    spec = specs.build(model="resnet50", framework="pytorch", batch_size=64, preset="paper", device="cuda")
    (run_dir / "spec.json").write_text(spec.model_dump_json())
    (run_dir / "summary.json").write_text(json.dumps({"status": "failed", "metrics": {}}))
    with pytest.raises(UserError, match="ended 'failed'"):
        reference.profile_run(run_dir, 1, 1, 10, 60)
    cpu = specs.build(model="resnet50", framework="pytorch", batch_size=4, preset="smoke", device="cpu")
    (run_dir / "spec.json").write_text(cpu.model_dump_json())
    (run_dir / "summary.json").write_text(json.dumps({"status": "ok", "metrics": {}}))
    with pytest.raises(UserError, match="profiles PyTorch on a GPU"):
        reference.profile_run(run_dir, 1, 1, 10, 60)
    with pytest.raises(UserError, match="not a finished run folder"):
        reference.profile_run(tmp_path / "nothing", 1, 1, 10, 60)


def test_reference_takes_batches_and_the_ncu_pass_s_warm_up_and_timeout(monkeypatch, tmp_path) -> None:
    got = {}
    monkeypatch.setattr(reference, "reference", lambda *a: got.setdefault("args", a))
    assert reference.main(["--model", "resnet50", "--batch", "32", "--batch", "64", "--ncu-warmup-s", "5",
                           "--ncu-timeout-s", "90", "--results", str(tmp_path)]) == 0
    assert got["args"][-3:] == ([32, 64], 5.0, 90.0)
    from typer.testing import CliRunner

    from tbdkit.cli.main import app

    text = " ".join(CliRunner().invoke(app, ["reference", "--help"], env={"COLUMNS": "200"}).output.split())
    for option in ("--batch", "--ncu-warmup-s", "--ncu-timeout-s", "--run"):
        assert option in text


def test_reference_runs_are_indexed_as_bench_runs_are(monkeypatch, tmp_path) -> None:
    """`make reference`'s runs are listed by `tbdkit runs` at once (the index holds them), as bench's are."""
    from tbdkit.launch.outcome import Outcome
    from tbdkit.results.index import INDEX, Index

    results = tmp_path / "results"
    monkeypatch.setattr(reference, "require_gpu", lambda: None)
    monkeypatch.setattr(reference, "agent_python", lambda: sys.executable)
    monkeypatch.setattr(reference, "missing_modules", lambda python, modules=(): [])
    monkeypatch.setattr(reference, "destination", lambda m, b, p: tmp_path / "committed" / f"{m}-b{b}-{p}")

    def fake_launch(spec, where, on_event, chosen=None, **options):
        run_dir = Path(where) / f"20260101-00000{spec.batch_size}-{spec.model}"
        run_dir.mkdir(parents=True)
        summary = {"run_id": run_dir.name, "status": "failed", "model": spec.model, "framework": "pytorch",
                   "batch_size": spec.batch_size, "error": "no GPU here"}
        (run_dir / "summary.json").write_text(json.dumps(summary))
        return Outcome(run_dir, "failed", summary)

    monkeypatch.setattr(reference.launch, "launch", fake_launch)
    reference.reference(["deepspeech2"], results, "fp32", 5, 5, 1, 1, use_ncu=False, batches=[2, 4])
    assert (results / INDEX).is_file()
    with sqlite3.connect(results / INDEX) as conn:
        assert sorted(r[0] for r in conn.execute("SELECT run_id FROM runs")) == [
            "20260101-000002-deepspeech2", "20260101-000004-deepspeech2"]
    assert len(Index(results).runs()) == 2
