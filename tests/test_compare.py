"""`tbdkit compare`: the ratio's interval on constructed series of known ratio (its coverage over
repeats, within one run each and between runs, with run-to-run variation), the verdicts, the
refusal of unlike runs and of sides that are not repeats, --force's list of differences,
--reference, and real CPU runs of the machinery check: three and three of one spec (same within noise, between
runs) and batch 8 against batch 2 (a verdict with its interval)."""

from __future__ import annotations

import csv
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tbdkit.analysis import compare
from tbdkit.core.statistics import ratio_estimate, t_quantile
from tbdkit.core.errors import UserError
from tbdkit.results.summary import MEASURED


def series(rng: random.Random, rate: float, n: int, sigma: float) -> tuple[list[float], list[float]]:
    """n iterations of a true throughput `rate` (ratio of mean work to mean time): utterance-like work of
    three sizes, each iteration's time off by a normal relative error of `sigma`."""
    works = [rng.choice([2.0, 3.0, 5.0]) for _ in range(n)]
    return works, [w / rate * (1 + rng.gauss(0, sigma)) for w in works]


def side_of(works: list[float], times: list[float]) -> tuple[float, float, int]:
    est = ratio_estimate(works, times)
    assert est.se is not None
    return est.throughput, est.se / est.throughput, est.dof


REPEATS = 10_000
MC_SE = (0.95 * 0.05 / REPEATS) ** 0.5  # Monte Carlo standard error of a 95% coverage over REPEATS


@pytest.mark.parametrize("n", [8, 20, 60])
def test_the_interval_covers_the_known_ratio_95_percent_of_the_time(n):
    """Nominal 95%, measured over 10,000 seeded repeats of two runs (true throughputs 13 and 10, 10% and
    5% noise, work of three sizes): the delta method with the conservative dof min(dof_A, dof_B) held
    1.3 in 95.3% (n=8), 94.9% (20), 95.4% (60) of them, 95% within the Monte Carlo error (0.22%).
    Welch-Satterthwaite's estimated dof, used before, held it in 93.7% (n=8) and 94.4% (20): below
    95% by more than two Monte Carlo errors, which this test refuses."""
    rng = random.Random(n)
    hits = 0
    for _ in range(REPEATS):
        a = side_of(*series(rng, 13.0, n, 0.10))
        b = side_of(*series(rng, 10.0, n + 3, 0.05))
        _, low, high, _, _ = compare.ratio_interval(*a, *b)
        hits += low <= 1.3 <= high
    assert hits / REPEATS >= 0.95 - 2 * MC_SE, hits / REPEATS


def test_equal_runs_are_same_within_noise_and_a_real_difference_is_found():
    rng = random.Random(7)
    same = faster = 0
    for _ in range(500):
        a, b = side_of(*series(rng, 10.0, 30, 0.05)), side_of(*series(rng, 10.0, 30, 0.05))
        _, low, high, _, detectable = compare.ratio_interval(*a, *b)
        same += low <= 1 <= high
        c = side_of(*series(rng, 10.0 * (1 + 2 * detectable), 30, 0.05))  # twice what the data can detect
        _, low, _, _, _ = compare.ratio_interval(*c, *b)
        faster += low > 1
    assert same / 500 >= 0.93           # false "different" at most ~5%
    assert faster / 500 >= 0.9          # a difference twice the detectable one is found (power > 80%)


def run_rates(rng: random.Random, rate: float, runs: int, n: int, sigma: float, tau: float) -> list[tuple[float, float, int]]:
    """`runs` runs of a true throughput `rate`, each off by a run-to-run factor exp(N(0, tau)) (the same for
    all its iterations: a process's placement, layout, the machine's state), then as `series`."""
    return [side_of(*series(rng, rate * math.exp(rng.gauss(0, tau)), n, sigma)) for _ in range(runs)]


# Run-to-run and iteration noise as measured here: 32 CPU runs of Deep Speech 2 batch 2 (6 window iterations
# each) had log throughputs with a standard deviation of 0.11 across runs, each run's own relative standard
# error about 0.06 (docs/energy-and-cost.md).
TAU, SIGMA, ITERATIONS = 0.09, 0.12, 6


def test_one_run_a_side_misses_run_to_run_variation_and_three_a_side_hold_it():
    """With run-to-run variation, an interval from each run's own iterations covers the true ratio far less
    than 95% (one run a side); the between-runs interval over three runs a side covers it at least 95% of
    the time, also when one side's runs vary twice as much from run to run as the other's; one reference
    run against three runs of the same spread is covered 95% of the time too."""
    rng = random.Random(11)
    repeats = 3000
    within = between = unequal = reference = 0
    for _ in range(repeats):
        (a,), (b,) = run_rates(rng, 13.0, 1, ITERATIONS, SIGMA, TAU), run_rates(rng, 10.0, 1, ITERATIONS, SIGMA, TAU)
        _, low, high, _, _ = compare.ratio_interval(*a, *b)
        within += low <= 1.3 <= high
        sa = [r[0] for r in run_rates(rng, 13.0, 3, ITERATIONS, SIGMA, TAU)]
        sb = [r[0] for r in run_rates(rng, 10.0, 3, ITERATIONS, SIGMA, TAU)]
        _, low, high, _, _ = compare.between_runs_interval(sa, sb)
        between += low <= 1.3 <= high
        _, low, high, _, _ = compare.between_runs_interval(sa, [sb[0]])
        reference += low <= 1.3 <= high
        sb = [r[0] for r in run_rates(rng, 10.0, 3, ITERATIONS, SIGMA, 2 * TAU)]
        _, low, high, _, _ = compare.between_runs_interval(sa, sb)
        unequal += low <= 1.3 <= high
    mc = (0.95 * 0.05 / repeats) ** 0.5
    assert within / repeats < 0.85, within / repeats  # what one run a side gives: too narrow
    for name, hits in (("three a side", between), ("unequal spreads", unequal), ("one reference run", reference)):
        assert hits / repeats >= 0.95 - 2 * mc, (name, hits / repeats)


def test_between_runs_interval_is_welchs_t_on_log_throughputs():
    from scipy import stats

    a, b = [10.0, 11.0, 10.5], [9.0, 9.6, 9.1, 9.9]
    ratio, low, high, dof, _ = compare.between_runs_interval(a, b, level=0.99)
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    ea, eb = stats.tvar(la) / 3, stats.tvar(lb) / 4
    satterthwaite = (ea + eb) ** 2 / (ea**2 / 2 + eb**2 / 3)
    half = stats.t.ppf(0.995, math.floor(satterthwaite)) * math.sqrt(ea + eb)
    assert dof == math.floor(satterthwaite) and ratio == pytest.approx(math.exp(sum(la) / 3 - sum(lb) / 4))
    assert (low, high) == (pytest.approx(ratio * math.exp(-half)), pytest.approx(ratio * math.exp(half)))
    # one run on a side: it varies as the other side's runs (their variance, nB - 1 dof)
    ratio, low, high, dof, _ = compare.between_runs_interval([10.0], b)
    half = stats.t.ppf(0.975, 3) * math.sqrt(stats.tvar(lb) * (1 + 1 / 4))
    assert dof == 3 and (low, high) == (pytest.approx(ratio * math.exp(-half)), pytest.approx(ratio * math.exp(half)))
    with pytest.raises(ValueError, match="three runs or more"):
        compare.between_runs_interval([10.0], [9.0])


@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.995, 0.9995])
def test_t_quantile_is_exact_for_few_degrees_of_freedom(p):
    from scipy import stats

    for dof in (*range(1, 30), 30, 60, 200):
        assert t_quantile(p, dof) == pytest.approx(stats.t.ppf(p, dof), rel=1e-9 if dof < 30 else 1e-3), dof
        assert t_quantile(1 - p, dof) == pytest.approx(-t_quantile(p, dof))


def make_run(root: Path, name: str, rate: float, n: int = 30, seed: int = 0, **fields) -> Path:
    """A finished run folder as the agent writes it: summary.json, spec.json, env.json, iterations.csv."""
    version = fields.pop("version", "2.14.1")
    rng = random.Random(seed)
    works, times = series(rng, rate, n, 0.05)
    run = root / name
    run.mkdir(parents=True)
    rows = [{"iteration": 0, "phase": "warmup", "start_s": 0, "seconds": 9.0, "data_wait_s": 0, "samples": 2,
             "work": 1.0, "loss": 1.0}]
    rows += [{"iteration": i + 1, "phase": "measure", "start_s": 0, "seconds": t, "data_wait_s": 0, "samples": 2,
              "work": w, "loss": 1.0} for i, (w, t) in enumerate(zip(works, times))]
    with (run / "iterations.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    est = ratio_estimate(works, times)
    summary = {"run_id": name, "status": "ok", "model": "deepspeech2", "framework": "pytorch", "batch_size": 2,
               "precision": "fp32", "preset": "smoke", "variant": None, "data": "synthetic", "device": "cpu",
               "window": {"first_iteration": 1, "last_iteration": n, "iterations": n, "seconds": sum(times),
                          "stop_reason": "time_cap"},
               "metrics": {"throughput": {"value": est.throughput, "unit": "audio_s/s", "method": "m",
                                          "ci95_half_width": est.half_width if n > 1 else None,
                                          "ci95_dof": est.dof if n > 1 else None}}}
    summary.update(fields)
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "spec.json").write_text(json.dumps({"model": "deepspeech2", "nodes": 1}))
    (run / "env.json").write_text(json.dumps({"framework": {"framework_version": version},
                                              "cpu": {"model": "test CPU", "logical_cores": 2}}))
    return run


def test_a_slower_run_is_slower_with_its_interval(tmp_path):
    a = compare.load(make_run(tmp_path, "a", 10.0))
    b = compare.load(make_run(tmp_path, "b", 12.0, seed=1))
    result = compare.compare(a, b)
    assert result.verdict == compare.SLOWER and result.high < 1
    assert result.low < 10 / 12 < result.high
    assert "A is slower than B" in result.sentence() and "95% CI" in result.sentence()
    assert result.noise == compare.WITHIN and "not the run-to-run variation" in result.sentence()
    assert "iterations.csv: 30 window iterations" in result.method  # the warm-up row is not in the window


def test_a_disturbed_run_is_compared_and_the_verdict_says_it_was_disturbed(tmp_path):
    a = compare.load(make_run(tmp_path, "a", 10.0, status="disturbed", disturbed_reasons=["foreign CPU load 1.2 cores"]))
    b = compare.load(make_run(tmp_path, "b", 10.0, seed=1))
    sentence = compare.compare(a, b).sentence()
    assert "A was disturbed (foreign CPU load 1.2 cores)" in sentence and "B was disturbed" not in sentence
    failed = make_run(tmp_path, "c", 10.0, status="failed")
    with pytest.raises(UserError, match="ended 'failed'"):
        compare.load(failed)


def test_unlike_runs_are_refused_unless_forced_and_then_every_difference_is_listed(tmp_path):
    a = compare.load(make_run(tmp_path, "a", 10.0))
    b = compare.load(make_run(tmp_path, "b", 10.0, seed=1, precision="amp", version="2.13.0"))
    with pytest.raises(UserError, match=r"not alike \(precision: 'fp32' vs 'amp'\).*--force"):
        compare.compare(a, b)
    result = compare.compare(a, b, force=True)
    assert ("precision", "fp32", "amp") in result.unlike
    assert ("env.framework.framework_version", "2.14.1", "2.13.0") in result.differences


def test_batch_size_may_differ_and_is_listed(tmp_path):
    a = compare.load(make_run(tmp_path, "a", 10.0))
    b = compare.load(make_run(tmp_path, "b", 20.0, seed=1, batch_size=8))
    result = compare.compare(a, b)
    assert result.verdict == compare.SLOWER and ("batch_size", 2, 8) in result.differences


def test_a_run_folder_without_iterations_uses_its_recorded_ci(tmp_path):
    run = make_run(tmp_path, "ref", 10.0)
    (run / "iterations.csv").unlink()
    side = compare.load(run)
    again = compare.load(make_run(tmp_path, "again", 10.0))  # the same series, from its iterations.csv
    assert side.dof == again.dof <= 29 and "summary.json's 95% CI" in side.source
    assert side.relative_se == pytest.approx(again.relative_se)
    # a summary written before the interval's dof was recorded: its iterations - 1
    summary = json.loads((run / "summary.json").read_text())
    del summary["metrics"]["throughput"]["ci95_dof"]
    (run / "summary.json").write_text(json.dumps(summary))
    assert compare.load(run).dof == 29


def test_reference_is_the_committed_run_of_the_same_spec(tmp_path):
    a = compare.load(make_run(tmp_path / "results", "a", 10.0))
    workloads = tmp_path / "workloads"
    assert compare.matching_reference(a, workloads) is None
    assert "holds none yet" in compare.no_reference_sentence(a, workloads)
    make_run(workloads / "deepspeech2" / "reference", "b8", 10.0, batch_size=8)
    assert compare.matching_reference(a, workloads) is None   # another batch size is not its reference
    make_run(workloads / "deepspeech2" / "reference", "b2", 10.0, seed=3)
    assert compare.matching_reference(a, workloads).path.name == "b2"


def tbdkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tbdkit.cli", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200"})


def test_repeats_a_side_give_a_between_runs_verdict_and_its_json(tmp_path):
    a = [compare.load(make_run(tmp_path, f"a{i}", 10.0 * (1 + 0.02 * i), seed=i)) for i in range(3)]
    b = [compare.load(make_run(tmp_path, f"b{i}", 12.0 * (1 - 0.02 * i), seed=10 + i)) for i in range(3)]
    result = compare.compare(a, b)
    assert result.noise == compare.BETWEEN and result.verdict == compare.SLOWER and result.caveat() == ""
    assert result.throughput_a == pytest.approx(compare.geometric_mean(a))
    assert "over 3 and 3 runs" in result.method and "run-to-run variation is in it" in result.method
    data = result.as_json()
    assert data["a"] == [str(side.path) for side in a] and data["noise"] == compare.BETWEEN
    assert data["level"] == 0.95 and data["interval"] == [round(result.low, 6), round(result.high, 6)]
    wider = compare.compare(a, b, level=0.99)
    assert wider.low < result.low and wider.high > result.high and "99% CI" in wider.sentence()
    a[1].summary.update(status="disturbed", disturbed_reasons=["foreign CPU load 0.9 cores"])
    assert compare.compare(a, b).sentence().endswith("Note: A a1 was disturbed (foreign CPU load 0.9 cores)")


def test_a_side_must_hold_repeats_of_one_spec_each_run_once(tmp_path):
    a = compare.load(make_run(tmp_path, "a", 10.0))
    b8 = compare.load(make_run(tmp_path, "b8", 10.0, seed=1, batch_size=8))
    c = compare.load(make_run(tmp_path, "c", 10.0, seed=2))
    with pytest.raises(UserError, match=r"Side A's runs a and b8 are not repeats of one spec \(batch_size: 2 vs 8\)"):
        compare.compare([a, b8], c)
    with pytest.raises(UserError, match="names one run twice"):
        compare.compare([a, a], c)
    with pytest.raises(UserError, match="on both sides"):
        compare.compare([a, c], [c])
    with pytest.raises(UserError, match=r"not a confidence level the comparison gives: give one in \[0.5, 0.9999\]"):
        compare.compare(a, c, level=95)


def test_cli_compares_repeats_at_a_level(tmp_path):
    runs = [make_run(tmp_path, f"r{i}", 10.0, seed=i) for i in range(4)]
    proc = tbdkit("compare", str(runs[0]), str(runs[1]), "--against", str(runs[2]), "--against", str(runs[3]),
                  "--level", "0.99", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert len(data["a"]) == 2 and len(data["b"]) == 2 and data["noise"] == compare.BETWEEN and data["level"] == 0.99
    proc = tbdkit("compare", str(runs[0]), str(runs[1]), "--reference")
    assert proc.returncode == 2 and "pass one run, or use --against" in proc.stdout + proc.stderr
    proc = tbdkit("compare", str(runs[0]), "--against", str(runs[1]), "--level", "2")
    assert proc.returncode == 2 and "not a confidence level" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_cli_refuses_a_missing_choice_and_says_no_reference_in_one_sentence(tmp_path):
    run = make_run(tmp_path, "a", 10.0)
    proc = tbdkit("compare", str(run))
    assert proc.returncode == 2 and "--against RUN2 or --reference" in proc.stderr + proc.stdout
    proc = tbdkit("compare", str(run), "--reference")
    assert proc.returncode == 2 and "holds none yet" in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout


def test_windows_of_one_iteration_compare_between_runs_and_not_one_run_a_side(tmp_path):
    """A run whose window had one iteration has no noise of its own; the between-runs interval does not use
    it, so three runs or more in all give a verdict; one a side says why there is none."""
    a = [compare.load(make_run(tmp_path, f"a{i}", 10.0 * (1 + 0.01 * i), n=1, seed=i)) for i in range(3)]
    b = [compare.load(make_run(tmp_path, f"b{i}", 14.0 * (1 - 0.01 * i), n=1, seed=10 + i)) for i in range(3)]
    assert a[0].se is None and a[0].ci95_relative is None and "1 window iteration" in a[0].source
    result = compare.compare(a, b)
    assert result.noise == compare.BETWEEN and result.verdict == compare.SLOWER
    assert compare.compare(a[:2], b[:1]).noise == compare.BETWEEN
    with pytest.raises(UserError, match=r"A \(a0\): iterations.csv: 1 window iteration, so its own noise is unknown.*"
                                        r"three runs or more in all"):
        compare.compare(a[0], b[0])
    proc = tbdkit("compare", *(str(s.path) for s in a), *(arg for s in b for arg in ("--against", str(s.path))))
    assert proc.returncode == 0 and "A is slower than B" in " ".join(proc.stdout.split()), proc.stdout + proc.stderr


def test_no_verdict_at_a_level_whose_interval_has_no_finite_bounds(tmp_path):
    a, b = make_run(tmp_path, "a", 10.0), make_run(tmp_path, "b", 10.0, seed=1)
    for level in ("0.999999999999", "1", "nan", "inf", "0.4"):
        proc = tbdkit("compare", str(a), "--against", str(b), "--level", level, "--json")
        assert proc.returncode == 2 and "not a confidence level" in proc.stdout + proc.stderr, (level, proc.stderr)
        assert "Traceback" not in proc.stdout + proc.stderr
    with pytest.raises(UserError, match="no finite bounds"):  # two runs of 2 noisy iterations at 99.99%: exp(4500)
        compare.ratio_interval(10.0, 0.5, 1, 10.0, 0.5, 1, level=0.9999)


# Real runs of the machinery check (mlp_numpy on the NumPy stack, docs/machinery-check.md): the comparison's
# statistics are the same whatever trains (each run's throughput and its window's iterations), and these runs carry
# this machine's real noise, run to run and iteration to iteration, at a second each. Warm-up ends at its 0.5 s cap
# (the step's cost settles within its first few iterations); the window holds at least 50 iterations, at most 1 s.
MEASURE = {"max_warmup_s": 0.5, "min_measure_iterations": 50, "max_measure_s": 1.0}


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """Six real CPU runs of one spec (batch 2), made in turn for side A and side B (A, B, A, B, A, B) so that a
    slow spell of this shared machine falls on both sides alike, then one run at batch 8."""
    from tbdkit.spec import run_spec as specs
    from tbdkit.bench.run_list import run_all

    results = tmp_path_factory.mktemp("results")
    run_specs = [specs.build(model="mlp_numpy", framework="numpy", batch_size=b, preset="smoke", device="cpu",
                             analyses=False, measure=MEASURE) for b in (2, 2, 2, 2, 2, 2, 8)]
    summaries = run_all(run_specs, results, "samples/s", quiet_stdout=True)
    assert all(s["status"] in MEASURED for s in summaries), summaries
    assert all(s["window"]["iterations"] >= 3 for s in summaries), [s["window"] for s in summaries]
    paths = [results / s["run_id"] for s in summaries]
    return (paths[0:6:2], paths[1:6:2]), paths[6]


def test_three_and_three_real_runs_of_one_spec_are_the_same_within_noise(real_runs):
    """Between runs, at 99%: three against three of 32 Deep Speech 2 runs made here (drawn 20,000 times) were called
    different 1.6% of the time at 95% and 0.16% at 99%; one run a side, 5 of 16 pairs were (31%). The runs here are
    the machinery check's."""
    (side_a, side_b), _ = real_runs
    against = [arg for path in side_b for arg in ("--against", str(path))]
    proc = tbdkit("compare", *map(str, side_a), *against, "--level", "0.99", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["noise"] == compare.BETWEEN and len(result["a"]) == len(result["b"]) == 3
    assert result["verdict"] == compare.SAME, result
    assert result["interval"][0] <= 1 <= result["interval"][1]
    summary = json.loads((side_a[0] / "summary.json").read_text())["metrics"]
    for name in ("gpu_energy", "cpu_energy", "cpu_power", "energy_per_work", "samples_per_kj"):
        assert summary[name]["value"] is None and summary[name]["reason"], summary[name]   # no RAPL, no GPU here


def test_batch_2_against_batch_8_gives_a_verdict_with_its_interval(real_runs):
    """One run at batch 8 against the three of side A at batch 2 (a between-runs interval), and against one
    of them (within one run each, with its caveat)."""
    (side_a, _), b8 = real_runs
    proc = tbdkit("compare", str(b8), "--against", str(side_a[0]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())
    assert "95% CI" in out and "batch_size" in out and "not the run-to-run variation" in out
    against = [arg for path in side_a for arg in ("--against", str(path))]
    result = json.loads(tbdkit("compare", str(b8), *against, "--json").stdout)
    assert result["noise"] == compare.BETWEEN
    assert "the single run's side taken to vary as the other side's runs do, dof 2" in result["method"]
    assert result["verdict"] in (compare.FASTER, compare.SLOWER, compare.SAME)
    low, high = result["interval"]
    assert low < result["ratio"] < high
    assert (result["verdict"] == compare.FASTER) == (low > 1) and (result["verdict"] == compare.SLOWER) == (high < 1)
