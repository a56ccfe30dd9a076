"""The sweep's logic without training: the max-batch search, resuming, the spread of repeats,
the index's sweep rows, the spec's validation, and the artifact's checks (fake runs, fast)."""

from __future__ import annotations

import io
import json
import secrets
import sys
import tarfile
import types
from pathlib import Path

import pytest

from tbdkit.artifact import bundle as artifact
from tbdkit.core.errors import UserError
from tbdkit.results.index import Index
from tbdkit.bench.sweep import RunResult, SweepRun, search_max
from tbdkit.spec.sweep_spec import parse


def fits_up_to(limit: int, calls: list[int]):
    def probe(b: int) -> str:
        calls.append(b)
        return "ok" if b <= limit else "oom"
    return probe


def test_search_doubles_then_bisects():
    calls: list[int] = []
    found = search_max(fits_up_to(13, calls), start=4, limit=4096)
    assert (found.batch_size, found.smallest_oom, found.status) == (13, 14, "found")
    assert calls == [4, 8, 16, 12, 14, 13]


def test_search_below_the_start_and_edges():
    calls: list[int] = []
    assert search_max(fits_up_to(5, calls), start=32, limit=4096).batch_size == 5
    assert calls == [32, 16, 8, 4, 6, 5]
    assert search_max(fits_up_to(0, []), start=4, limit=64).status == "none_fit"
    capped = search_max(fits_up_to(10**6, []), start=4, limit=48)
    assert (capped.batch_size, capped.status) == (48, "limit")
    broken = search_max(lambda b: "ok" if b < 8 else "failed", start=2, limit=64)
    assert broken.status == "failed" and "batch 8" in broken.reason


class FakeRunner:
    """Makes a run folder per call; status and throughput come from `plan(spec, call_number, probe)`, and a third
    value, where it gives one, says the user pressed Ctrl-C during the run."""

    def __init__(self, plan):
        self.plan = plan
        self.calls: list[tuple[int, bool]] = []

    def __call__(self, spec, where: Path, probe: bool) -> RunResult:
        self.calls.append((spec.batch_size, probe))
        status, thr, *pressed = self.plan(spec, len(self.calls), probe)
        run_dir = where / f"run-{len(self.calls):03d}-{secrets.token_hex(3)}-{'probe' if probe else 'b'}{spec.batch_size}"
        run_dir.mkdir(parents=True)
        summary = {"run_id": run_dir.name, "status": status, "model": spec.model, "framework": spec.framework,
                   "batch_size": spec.batch_size, "precision": spec.precision,
                   "metrics": {"throughput": {"value": thr, "unit": "audio_s/s"}} if thr else {}}
        (run_dir / "summary.json").write_text(json.dumps(summary))
        return RunResult(status, run_dir.name, run_dir, summary, interrupted=bool(pressed and pressed[0]))


def sweep_spec(tmp_path: Path, **over):
    return parse({"model": "deepspeech2", "frameworks": ["pytorch"], "batches": [2, 4], "precisions": ["fp32"],
                  "device": "cpu", "results": str(tmp_path / "results"), **over})


def test_resume_keeps_done_points_and_retries_failed(tmp_path):
    spec = sweep_spec(tmp_path, repeat=2)
    first = FakeRunner(lambda s, n, p: ("failed", None) if n == 2 else ("ok", 10.0 + n))
    state = SweepRun(spec, first).run()
    assert [p["status"] for p in state["points"].values()] == ["ok", "failed", "ok", "ok"]
    again = FakeRunner(lambda s, n, p: ("ok", 11.0))
    state = SweepRun(sweep_spec(tmp_path, repeat=2), again).run()
    assert again.calls == [(2, False)]  # only the failed point ran again
    retried = state["points"]["pytorch/fp32/b2/r1"]
    assert retried["status"] == "ok" and [a["status"] for a in retried["attempts"]] == ["failed", "ok"]
    on_disk = json.loads((spec.state_dir() / "sweep.json").read_text())
    assert on_disk["points"] == state["points"]
    # a third run with more repeats continues the same sweep: only the new repeat runs
    more = FakeRunner(lambda s, n, p: ("ok", 12.0))
    SweepRun(sweep_spec(tmp_path, repeat=3), more).run()
    assert more.calls == [(2, False), (4, False)]


def test_spread_and_instability_reach_the_index(tmp_path):
    spec = sweep_spec(tmp_path, repeat=2, cv_limit=0.1)
    # batch 2: 10 and 20 (CV 47%, unstable); batch 4: 30 and 31 (CV 2.3%, stable)
    values = iter([10.0, 20.0, 30.0, 31.0])
    state = SweepRun(spec, FakeRunner(lambda s, n, p: ("ok", next(values)))).run()
    g2, g4 = state["groups"]["pytorch/fp32/b2"], state["groups"]["pytorch/fp32/b4"]
    assert g2["unstable"] and "47.1% > 10.0%" in g2["unstable_reason"] and g2["throughput_mean"] == 15.0
    assert g4["throughput_cv"] == pytest.approx(0.7071 / 30.5, rel=1e-3) and not g4["unstable"]
    assert state["points"]["pytorch/fp32/b2/r0"]["unstable"] is True
    index = Index(spec.results)
    index.add_sweep(state)
    rows = {r["point"]: r for r in index.sweep_points()}
    assert rows["pytorch/fp32/b2/r1"]["unstable"] == 1 and rows["pytorch/fp32/b4/r0"]["unstable"] == 0
    assert rows["pytorch/fp32/b2/r1"]["group_throughput_cv"] == pytest.approx(g2["throughput_cv"])
    (spec.results / "index.sqlite").unlink()
    assert {r["point"] for r in Index(spec.results).sweep_points()} == set(rows)  # rebuilt from sweep.json


def test_max_point_lowers_itself_when_its_measured_run_runs_out(tmp_path):
    spec = sweep_spec(tmp_path, batches=[2, "max"])

    def plan(s, n, probe):  # probes fit up to 6; the measured run at 6 does not, at 5 it does
        if probe:
            return ("ok", 1.0) if s.batch_size <= 6 else ("oom", None)
        return ("ok", 1.0) if s.batch_size <= 5 else ("oom", None)

    runner = FakeRunner(plan)
    state = SweepRun(spec, runner).run()
    search = state["max_batch"]["pytorch/fp32"]
    assert (search["status"], search["batch_size"]) == ("found", 5)
    assert state["points"]["pytorch/fp32/bmax/r0"]["batch_size"] == 5
    assert state["points"]["pytorch/fp32/bmax/r0"]["status"] == "ok"
    assert search["probes"]["6"]["status"] == "oom" and search["probes"]["6"]["superseded"]["status"] == "ok"
    assert [c for c in runner.calls if not c[1]] == [(2, False), (6, False), (5, False)]
    probe_dirs = {p.name for p in (spec.state_dir() / "probes").iterdir()}
    # batch 2 is known from its measured point; then 4, 8 (oom), 6, 7 (oom), and 5 after 6 failed measured
    assert sorted(name.rsplit("probe", 1)[1] for name in probe_dirs) == ["4", "5", "6", "7", "8"]


@pytest.mark.parametrize("status, kept", [("ok", True), ("disturbed", True), ("interrupted", False)])
def test_ctrl_c_stops_the_sweep_after_its_run_and_a_rerun_keeps_or_reruns_it(tmp_path, status, kept):
    """A Ctrl-C during the first point's run: one that finished (after its window: ok or disturbed, no retry) is
    kept and done, one stopped inside its window runs again; no later point starts until the sweep is run again."""
    spec = sweep_spec(tmp_path, retry_disturbed=2)
    first = FakeRunner(lambda s, n, p: (status, 10.0, True))
    state = SweepRun(spec, first).run()
    assert first.calls == [(2, False)]  # batch 4 never started, a disturbed run was not retried
    stopped = state["interrupted"]
    b2 = state["points"]["pytorch/fp32/b2/r0"]
    assert (stopped["at"], stopped["run_id"], stopped["status"], stopped["kept"]) == \
        ("pytorch/fp32/b2/r0", b2["run_id"], status, kept)
    assert b2["status"] == status and "Ctrl-C" in b2["attempts"][0]["interrupted"]
    assert state["points"]["pytorch/fp32/b4/r0"]["status"] == "pending"
    assert json.loads((spec.state_dir() / "sweep.json").read_text())["interrupted"] == stopped
    again = FakeRunner(lambda s, n, p: ("ok", 11.0))
    resumed = SweepRun(sweep_spec(tmp_path, retry_disturbed=2), again)
    assert any("stopped here (Ctrl-C)" in note for note in resumed.state.recovered)
    state = resumed.run()
    assert again.calls == ([] if kept else [(2, False)]) + [(4, False)]
    assert state["interrupted"] is None and state["points"]["pytorch/fp32/b4/r0"]["status"] == "ok"
    assert (state["points"]["pytorch/fp32/b2/r0"]["run_id"] == b2["run_id"]) is kept


def test_ctrl_c_during_a_max_batch_probe_ends_the_search_and_a_rerun_reuses_the_probe(tmp_path):
    spec = sweep_spec(tmp_path, batches=["max"])
    first = FakeRunner(lambda s, n, p: ("ok", 1.0, True))  # the probe at batch 4 finished as Ctrl-C came
    state = SweepRun(spec, first).run()
    assert first.calls == [(4, True)]
    search = state["max_batch"]["pytorch/fp32"]
    assert search["status"] == "interrupted" and "Ctrl-C" in search["probes"]["4"]["interrupted"]
    assert state["interrupted"]["at"] == "max-batch search pytorch/fp32, probe at batch 4"
    assert state["points"]["pytorch/fp32/bmax/r0"]["status"] == "pending"  # not failed: it runs when resumed
    again = FakeRunner(lambda s, n, p: ("ok", 1.0) if s.batch_size <= 6 else ("oom", None))
    state = SweepRun(sweep_spec(tmp_path, batches=["max"]), again).run()
    assert again.calls == [(8, True), (6, True), (7, True), (6, False)]  # batch 4's probe is known
    assert state["points"]["pytorch/fp32/bmax/r0"]["status"] == "ok" and state["interrupted"] is None


@pytest.mark.parametrize("over, words", [
    ({"precisions": ["fp16"]}, ["precisions.0", "'fp32', 'tf32', 'amp', 'bf16' or 'fp8'"]),
    ({"batches": [0]}, ["batches", "whole numbers from 1 to 65,536 or 'max'"]),
    ({"batches": [2**62]}, ["batches", "whole numbers from 1 to 65,536 or 'max'"]),
    ({"batches": list(range(1, 100))}, ["batches", "at most 64 of them"]),
    ({"max_batch_limit": 2**20}, ["max_batch_limit", "from 1 to 65,536"]),
    ({"measure": {"max_warmup_s": 1e6}}, ["measure.max_warmup_s", "at most 3600"]),
    ({"measure": {"synthetic_pool": 10**12}}, ["measure.synthetic_pool", "from 1 to 1024"]),
    ({"measure": [1]}, ["measure", "MeasurePolicy fields"]),
    ({"memory_limit_mb": 2**40}, ["memory_limit_mb", "16 TiB"]),
    ({"cpus": 10**6}, ["cpus", "1 to 4096 cores"]),
    ({"batches": ["huge"]}, ["batches", "'max'"]),
    ({"frameworks": ["jax"]}, ["unknown framework 'jax'"]),
    ({"repeat": 0}, ["repeat", "1 to 100 times"]),
    ({"cv_limit": 2}, ["cv_limit", "below 1"]),
    ({"cv_limit": float("nan")}, ["cv_limit", "below 1"]),
    ({"model": "alexnet"}, ["model", "deepspeech2"]),
    ({"preset": "converge"}, ["preset", "a sweep measures throughput", "--preset converge"]),
])
def test_invalid_sweep_names_the_field(tmp_path, over, words):
    with pytest.raises(UserError) as err:
        sweep_spec(tmp_path, **over)
    for word in words:
        assert word in str(err.value)
    assert not (tmp_path / "results").exists()


# ---------------------------------------------------------------- artifact checks

def results_with_one_run(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    run = results / "run-1"
    run.mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps({"model": "deepspeech2", "batch_size": 2}))
    (run / "summary.json").write_text(json.dumps({"run_id": "run-1", "status": "ok"}))
    return results


def test_bundle_calls_the_report_builder_when_there_is_one(tmp_path, monkeypatch):
    results = results_with_one_run(tmp_path)
    fake = types.ModuleType("tbdkit.report")

    def build_report(results_dir: Path, out_dir: Path) -> Path:
        assert results_dir == results
        (out_dir / "figures").mkdir()
        (out_dir / "figures" / "fig4.svg").write_text("<svg/>")
        (out_dir / "report.html").write_text("<html>report</html>")
        return out_dir / "report.html"

    fake.build_report = build_report  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tbdkit.report", fake)
    manifest = artifact.bundle(results, tmp_path / "a.tar.gz")
    assert manifest["report"] == {"included": True, "path": "report/report.html"}
    _, files = artifact.read(tmp_path / "a.tar.gz")
    assert files["report/report.html"] == b"<html>report</html>" and "report/figures/fig4.svg" in files


def test_a_failing_report_leaves_the_bundle_and_says_why(tmp_path, monkeypatch):
    fake = types.ModuleType("tbdkit.report")

    def build_report(results_dir, out_dir):
        raise RuntimeError("matplotlib exploded")

    fake.build_report = build_report  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tbdkit.report", fake)
    manifest = artifact.bundle(results_with_one_run(tmp_path), tmp_path / "a.tar.gz")
    assert manifest["report"]["included"] is False and "matplotlib exploded" in manifest["report"]["reason"]
    assert "results/run-1/summary.json" in manifest["files"]


def _rewrite(src: Path, dst: Path, change) -> None:
    with tarfile.open(src) as tar, tarfile.open(dst, "w:gz") as out:
        for member in tar.getmembers():
            data = tar.extractfile(member).read()
            member, data = change(member, data)
            out.addfile(member, io.BytesIO(data))


def test_reading_refuses_damaged_foreign_and_unsafe_bundles(tmp_path):
    good = tmp_path / "a.tar.gz"
    manifest = artifact.bundle(results_with_one_run(tmp_path), good)
    assert set(manifest["files"]) >= {"results/run-1/spec.json", "results/run-1/summary.json"}
    assert manifest["runs"] == ["run-1"] and manifest["kit_version"]
    artifact.read(good)

    def tamper(member, data):
        return member, (b'{"status": "ok", "run_id": "forged"}' if member.name.endswith("summary.json") else data)

    def escape(member, data):
        if member.name.endswith("spec.json"):
            member.name = "tbdkit-artifact/../../etc/evil"
        return member, data

    def link(member, data):
        if member.name.endswith("spec.json"):
            member.type, member.linkname, member.size = tarfile.SYMTYPE, "/etc/passwd", 0
            data = b""
        return member, data

    cases = {"tampered": (tamper, "does not match its sha256"), "escape": (escape, "unsafe or foreign member"),
             "link": (link, "link or device")}
    for name, (change, words) in cases.items():
        bad = tmp_path / f"{name}.tar.gz"
        _rewrite(good, bad, change)
        with pytest.raises(UserError, match=words):
            artifact.read(bad)
    (tmp_path / "junk.tar.gz").write_bytes(good.read_bytes()[:200])
    with pytest.raises(UserError, match="corrupt|not a readable"):
        artifact.read(tmp_path / "junk.tar.gz")
    foreign = tmp_path / "foreign.tar.gz"
    with tarfile.open(foreign, "w:gz") as tar:
        info = tarfile.TarInfo("tbdkit-artifact/manifest.json")
        data = b'{"format": "something-else/3"}'
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(UserError, match="is not a tbdkit-artifact/1 bundle"):
        artifact.read(foreign)


def test_compare_gives_ratios_and_says_why_not():
    old = {"run_id": "a", "status": "ok", "metrics": {"throughput": {"value": 20.0, "unit": "audio_s/s"},
                                                      "gpu_utilization": {"value": None, "unit": "%"},
                                                      "cpu_utilization": {"value": 50.0, "unit": "%"}}}
    new = {"run_id": "b", "status": "ok", "metrics": {"throughput": {"value": 25.0, "unit": "audio_s/s"},
                                                      "gpu_utilization": {"value": None},
                                                      "cpu_utilization": {"value": 0.0}}}
    point = artifact.compare(old, new)
    assert point["metrics"]["throughput"]["ratio"] == 1.25
    assert point["metrics"]["cpu_utilization"]["ratio"] == 0.0
    assert "gpu_utilization" not in point["metrics"]  # a number in neither run
    failed = artifact.compare(old, {"run_id": "c", "status": "oom", "metrics": {}})
    assert failed["metrics"]["throughput"] == {"recorded": 20.0, "new": None, "unit": "audio_s/s", "ratio": None,
                                               "reason": "the new run did not finish ok",
                                               "recorded_ci95_relative": None, "new_ci95_relative": None}


def test_a_sweep_that_does_not_fit_this_machine_stops_before_any_run(tmp_path, monkeypatch):
    """fits_here, as bench checks it, for every framework and precision of the grid, before a run starts."""
    from tbdkit import launch as launch_module
    from tbdkit.bench import sweep as sweep_module
    from tbdkit.env import cpus

    monkeypatch.setattr(cpus, "available", lambda: 1)
    monkeypatch.setattr(launch_module, "launch", lambda *a, **k: pytest.fail("a run was launched"))
    with pytest.raises(UserError, match=r"--cpus 2 asks for more cores than this process may use \(1"):
        sweep_module.run_sweep(sweep_spec(tmp_path, cpus=2), "audio_s/s", quiet_stdout=True)
    assert not (tmp_path / "results").exists()
