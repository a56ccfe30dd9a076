"""tbdkit calibrate: each probe recovers its known answer, and turns `off` when its instrument is biased."""

from __future__ import annotations

import time

import pytest

from tbdkit.calibrate import timing
from tbdkit.calibrate.verdict import Tolerance, judge


def test_judge_within_and_off():
    assert judge(100.0, 104.0, Tolerance(relative=0.05), "%") == "trusted"
    assert judge(100.0, 50.0, Tolerance(relative=0.05), "%").startswith("off by -50")


def test_timing_probe_recovers_known_warmup_rate_and_coverage():
    results = {r.instrument: r for r in timing.probe(repeats=12, seed=1)}
    assert results["timing.warmup_detector"].verdict == "trusted"
    assert results["timing.warmup_detector"].measured >= timing.SyntheticLoop().true_warmup_end
    assert results["timing.throughput_ci"].status == "trusted"
    assert results["timing.throughput"].status == "trusted"


def test_timing_probe_off_when_the_clock_runs_at_half_speed():
    r = timing.probe(repeats=4, clock=lambda: time.perf_counter() * 0.5)[-1]
    assert r.status == "off"


def test_timing_probe_off_when_warmup_ends_too_early():
    warm, ci, _ = timing.probe(repeats=12, detector=lambda costs, w, t, m: len(costs) >= 20)
    assert warm.status == "off" and ci.status == "off"


# --- CPU probes: real threads and allocations on this machine ---------------------------------

from tbdkit.agent.collectors.cpu import CpuCollector  # noqa: E402
from tbdkit.calibrate import host  # noqa: E402


class HalfCpuCollector(CpuCollector):
    """Deliberately biased: reports half the process's CPU time."""
    def _proc_cpu(self) -> float:
        return super()._proc_cpu() / 2


class _HalfRss:
    def __init__(self, proc):
        self.proc = proc

    def memory_info(self):
        class M:
            rss = self.proc.memory_info().rss // 2
        return M

    def cpu_times(self):
        return self.proc.cpu_times()


class HalfRssCollector(CpuCollector):
    def __init__(self) -> None:
        super().__init__()
        self.proc = _HalfRss(self.proc)


def test_cpu_probe_trusts_the_real_collector():
    busy, idle, system = host.cpu_probe(seconds=0.6)
    assert busy.status == "trusted", busy
    assert idle.status == "trusted", idle
    assert system.status == "trusted", system
    assert busy.details["cores"] >= 1 and "background_load_pct" in busy.details


def test_cpu_probe_off_when_the_collector_reports_half_the_cpu_time():
    busy = host.cpu_probe(seconds=0.6, collector=HalfCpuCollector)[0]
    assert busy.status == "off", busy


def test_memory_probe_recovers_the_allocation_and_is_off_when_rss_is_halved():
    assert host.memory_probe(32).status == "trusted"
    assert host.memory_probe(32, collector=HalfRssCollector).status == "off"


def test_median_ci_and_rounds_needed():
    med, lo, hi = host.median_ci([float(i) for i in range(1, 11)])  # n = 10: ranks 2 and 9
    assert (med, lo, hi) == (5.5, 2.0, 9.0)
    assert host.median_ci([1.0, 2.0])[1] == float("-inf")  # too few rounds for a 95% interval
    assert host.rounds_needed(10, 0.98, 1.02, 1.0) == 160  # 4% wide -> 16x the rounds


def test_overhead_aa_turns_off_when_one_arm_is_biased():
    aa = host.overhead_probe(rounds=6, block=50, slow_full=2.0)[0]
    assert aa.status == "off", aa


# --- the command, calibration.json, env.json's link to it ---------------------------------------

import json  # noqa: E402

from typer.testing import CliRunner  # noqa: E402

from tbdkit.calibrate import record  # noqa: E402
from tbdkit.cli import app  # noqa: E402


def test_calibrate_quick_prints_the_table_and_writes_calibration_json(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "probe", lambda repeats: _real_probe(repeats=6))  # fewer repeats in CI
    out = CliRunner().invoke(app, ["calibrate", "--quick", "--results", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "cpu.peak_rss" in out.output and "verdict" in out.output
    doc = json.loads((tmp_path / "calibration.json").read_text())
    assert doc["machine"] == record.machine() and doc["quick"] is True
    assert {p["instrument"] for p in doc["probes"]} >= {"timing.throughput", "cpu.process_utilization", "cpu.peak_rss"}
    assert doc["verdicts"]["peak_rss"] == "trusted"
    # the machine's own steadiness, measured beside the verdicts (no verdict of its own), printed and recorded
    steady = doc["steadiness"]
    assert 0 < steady["noise"] < 1 and steady["blocks"] >= 20 and 0.1 < steady["block_s"] < 0.4, steady
    assert set(steady["iterations_needed"]) == {"smoke", "paper"} and "one BLAS thread" in steady["method"]
    assert f"varied {steady['noise']:.1%} block to block" in " ".join(out.output.split())
    run = tmp_path / "20260101-run"
    run.mkdir()
    linked = record.for_run(run)
    assert linked["calibrated"] and linked["verdicts"]["peak_rss"] == "trusted"
    assert linked["steadiness"] == steady  # every later run's env.json quotes it
    assert linked["path"] == str((tmp_path / "calibration.json").resolve())


_real_probe = timing.probe


def test_steadiness_recovers_a_known_noise_and_wander():
    """Identical blocks whose times carry a known noise (lognormal, 5%) and, in a second series, a step of +10%
    halfway: the probe's summary recovers both, and the warm-up need is the rule's own at that noise."""
    import random

    from tbdkit.calibrate import steadiness
    from tbdkit.core.statistics import warmup_iterations_needed

    rng = random.Random(7)
    flat = [0.2 * rng.lognormvariate(0, 0.05) for _ in range(400)]
    got = steadiness.summarize(flat)
    assert 0.045 < got["noise"] < 0.055 and abs(got["wander"]) < 0.015, got
    assert got["iterations_needed"]["smoke"] == warmup_iterations_needed(got["noise"], 30, 0.05, 60, projection=0.5)
    assert got["iterations_needed"]["paper"] == warmup_iterations_needed(got["noise"], 50, 0.05, 100)
    stepped = [t * (1.1 if i >= 200 else 1.0) for i, t in enumerate(flat)]
    assert 0.09 < steadiness.summarize(stepped)["wander"] < 0.11
    noisy = steadiness.summarize([0.2 * rng.lognormvariate(0, 0.15) for _ in range(400)])
    assert noisy["iterations_needed"]["paper"] is None  # the paper rule can never judge it: said as never
    assert "about 6" not in steadiness.sentence(noisy) and "never (paper)" in steadiness.sentence(noisy)
    # a damaged or forged record (ARTIFACT.md reads it from a bundle) is said, never a traceback
    assert steadiness.sentence({"noise": "high"}).startswith("steadiness: not measured (no reason recorded)")
    odd = steadiness.sentence({"noise": 0.08, "block_s": "long", "wander": None, "iterations_needed": [60]})
    assert odd == ("steadiness: identical 0.2 s blocks of matrix products (one thread) varied 8.0% block to block; "
                   "the warm-up rule's need at that noise was not recorded")
    forged = steadiness.sentence({"noise": 0.08, "iterations_needed": {"smoke": 10**400, "paper": None, "x": 3}})
    assert forged.endswith("needs warm-up iterations before the rule can judge it stable: about ? (smoke), never (paper)")
    few = steadiness.summarize([0.2, 0.21])
    assert few["noise"] is None and "too few" in few["reason"] and "not measured" in steadiness.sentence(few)


def test_calibrate_rejects_an_unknown_device(tmp_path):
    out = CliRunner().invoke(app, ["calibrate", "--device", "tpu", "--results", str(tmp_path)])
    assert out.exit_code == 2 and "cuda:0" in out.output


def test_a_calibration_of_another_machine_is_not_this_ones(tmp_path):
    (tmp_path / "calibration.json").write_text(json.dumps({"machine": {"hostname": "elsewhere"}, "verdicts": {}}))
    linked = record.for_run(tmp_path / "run")
    assert not linked["calibrated"] and "another machine" in linked["reason"]
    assert not record.for_run(tmp_path.parent / "nowhere")["calibrated"]


def test_only_the_results_folders_own_calibration_counts(tmp_path):
    """A calibration.json above the results folder (/tmp/calibration.json for `-r /tmp/x`) is not this
    results folder's: a forged one there marks nothing failed."""
    forged = {"kind": "tbdkit-calibration", "machine": record.machine(), "verdicts": {"throughput": "off"}}
    (tmp_path / "calibration.json").write_text(json.dumps(forged))
    results = tmp_path / "x"
    for run in ("run", "run/workers/rank1"):
        (results / run).mkdir(parents=True, exist_ok=True)
        linked = record.for_run(results / run)
        assert not linked["calibrated"] and "no calibration.json in the results folder" in linked["reason"], run


@pytest.mark.parametrize("text, words", [
    ("[1]", "not one tbdkit calibrate writes"),
    ('{"machine": [1], "verdicts": {}}', "machine"),
    ('{"machine": {}, "verdicts": {"throughput": "maybe"}}', "verdicts.throughput"),
    ('{"machine": {}, "verdicts": ' + "[" * 5000 + "]" * 5000 + "}", "not one tbdkit calibrate writes"),
    ("\xff\xfe not text", "not one tbdkit calibrate writes"),
])
def test_a_malformed_calibration_is_no_calibration_with_the_reason(tmp_path, text, words):
    (tmp_path / "calibration.json").write_bytes(text.encode("latin-1"))
    (tmp_path / "run").mkdir()
    linked = record.for_run(tmp_path / "run")
    assert not linked["calibrated"] and words in linked["reason"]


def test_instrument_verdicts_take_the_worst_probe():
    probes = [{"metrics": ["throughput"], "status": "trusted"}, {"metrics": ["throughput"], "status": "off"},
              {"metrics": ["peak_rss"], "status": "unsupported"}]
    assert record.instrument_verdicts(probes) == {"throughput": "off", "peak_rss": "unsupported"}


def test_env_json_names_this_machines_calibration(tmp_path):
    from tbdkit.env import machine as envinfo
    from tbdkit.calibrate.verdict import ProbeResult, Tolerance

    probe = ProbeResult("cpu.peak_rss", "constructed", 1.0, 0.5, "MiB", Tolerance(), "off by -0.5 MiB", ("peak_rss",))
    record.write(tmp_path, "cpu", True, [probe])
    env = envinfo.collect({}, 0, tmp_path)
    assert env["calibration"]["calibrated"] and env["calibration"]["verdicts"] == {"peak_rss": "off"}
    assert env["calibration"]["time_utc"] and env["calibration"]["path"].endswith("calibration.json")
    # a run folder, a worker's, a sweep probe's: each finds its results folder's own file, by the layout
    for run in ("run", "run/workers/rank1", "sweeps/s1/probes/p1", "sweeps/s1/probes/p1/workers/rank0"):
        (tmp_path / run).mkdir(parents=True, exist_ok=True)
        assert record.for_run(tmp_path / run)["verdicts"] == {"peak_rss": "off"}, run


# --- the report: marks and exclusions ------------------------------------------------------------

def _calibrate_env(run, verdicts):
    env = json.loads((run / "env.json").read_text())
    env["calibration"] = {"calibrated": True, "path": "/r/calibration.json", "time_utc": "2026-11-24T11:00:00",
                          "verdicts": verdicts}
    (run / "env.json").write_text(json.dumps(env))


def test_report_excludes_a_failed_instrument_from_the_claims_and_marks_it(tmp_path):
    from report_fixtures import make_run

    from tbdkit.report import claims, runs, tables

    h100 = {"device": "cuda:0", "device_name": "NVIDIA H100 80GB HBM3"}
    made = [make_run(tmp_path, "resnet50", "pytorch", b, t, **h100) for b, t in ((2, 10.0), (4, 18.0), (8, 30.0))]
    loaded = runs.load(tmp_path)
    assert claims.check_all(loaded)[0].verdict == claims.HOLDS
    assert all(row[-1] == "uncalibrated" for row in tables.display_rows(loaded))  # a word; the reasons below
    assert all("uncalibrated: " in note and "throughput" in note for note in tables.flag_notes(loaded))
    for run in made:
        _calibrate_env(run, {"throughput": "off", "cpu_utilization": "trusted"})
    loaded = runs.load(tmp_path)
    assert claims.check_all(loaded)[0].verdict != claims.HOLDS  # no trusted throughput: no evidence
    flags = tables.flag_notes(loaded)[0]
    assert "calibration failed: throughput" in flags and "cpu_utilization" not in flags
    assert loaded[0].metric("throughput") == 10.0  # still shown, only marked


def test_idle_probe_is_not_fooled_by_work_elsewhere_in_the_calling_process():
    """A test runner's leftover thread (or a child it reaps) is CPU time in this process: the idle
    probe watches a process that sleeps by construction, so the stray work is not blamed on the collector."""
    import threading

    stop = threading.Event()

    def stray() -> None:
        while not stop.is_set():
            sum(range(10_000))

    t = threading.Thread(target=stray, daemon=True)
    t.start()
    try:
        idle = host.cpu_probe(seconds=0.6)[1]
    finally:
        stop.set()
        t.join()
    assert idle.status == "trusted", idle
    assert idle.probe.startswith("a sleeping process")
