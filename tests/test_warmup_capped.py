"""A warm-up that a cap ended is said so: in the results table (`tbdkit bench`, `tbdkit show`) and
in `tbdkit show`'s notes; and the smoke preset's warm-up rule can end warm-up within its cap."""

from __future__ import annotations

import functools
import json

from rich.console import Console

from report_fixtures import make_run
from model_checks import cli
from tbdkit.cli.console import results_table

tbdkit = functools.partial(cli, env={"COLUMNS": "250"})  # in this process

CAPPED = {"iterations": 99, "seconds": 30.2, "end_reason": "time_cap", "rule": "..."}
STABLE = {"iterations": 40, "seconds": 12.5, "end_reason": "stable", "rule": "..."}


def with_warmup(run, warmup):
    path = run / "summary.json"
    summary = json.loads(path.read_text())
    summary["warmup"] = warmup
    summary["window"] = {"iterations": 30, "seconds": 9.0, "stop_reason": "time_cap"}
    path.write_text(json.dumps(summary))
    return summary


def rendered(summaries) -> str:
    console = Console(width=250, record=True)
    console.print(results_table(summaries))
    return console.export_text()


def test_the_results_table_says_which_warm_ups_were_capped(tmp_path):
    capped = with_warmup(make_run(tmp_path, "deepspeech2", "pytorch", 4, 10.0), CAPPED)
    stable = with_warmup(make_run(tmp_path, "deepspeech2", "mxnet", 4, 12.0), STABLE)
    text = rendered([capped, stable])
    rows = [line for line in text.splitlines() if "pytorch" in line or "mxnet" in line]
    assert "capped" in rows[0] and "stable" in rows[1] and "capped" not in rows[1]
    assert "warm-up capped: a cap ended it before the rule judged the iteration cost stable" in text
    assert "its cost varied" not in text  # no noise recorded: nothing more to say
    # where the noise was recorded, the table says why, run by run (what `make bench` prints)
    quiet = {"value": 0.01, "unit": "cores", "limit": 0.25}
    noisy = with_warmup(make_run(tmp_path, "deepspeech2", "tensorflow", 4, 9.0),
                        CAPPED | {"cost_noise": 0.084, "iterations_needed": 262, "foreign_cpu": quiet})
    text = " ".join(rendered([capped, noisy, stable]).split())
    suffix = noisy["run_id"].rsplit("-", 1)[-1]
    assert (f"{suffix}: its cost varied 8.4% per iteration, with other processes using 0.01 of its cores: the noise "
            "was this machine's own or the step's; at that noise the rule needs about 262 iterations; a cap with room "
            "for 2 times that, at 0.31 s an iteration: make's MAX_WARMUP_S=160 (--max-warmup-s 160)") in text
    assert text.count("its cost varied") == 1  # the capped run without a recorded noise has no line
    assert "capped" not in rendered([stable])


def test_show_says_the_warm_up_was_capped(tmp_path):
    results = tmp_path / "results"
    run = make_run(results, "deepspeech2", "pytorch", 4, 10.0)
    with_warmup(run, CAPPED)
    shown = tbdkit("show", run.name, "-r", str(results))
    assert shown.returncode == 0, shown.stderr
    out = " ".join(shown.stdout.split())
    assert "warm-up capped: its time cap ended it after 99 iterations (30.2 s) before the rule judged" in out
    with_warmup(run, CAPPED | {"cost_noise": 0.0742, "iterations_needed": 205})
    out = " ".join(tbdkit("show", run.name, "-r", str(results)).stdout.split())
    assert ("its cost varied 7.4% per iteration; at that noise the rule needs about 205 iterations; a cap with room "
            "for 2 times that, at 0.31 s an iteration: make's MAX_WARMUP_S=130 (--max-warmup-s 130)") in out
    # whose noise it was: other processes' load over the warm-up, against the window's limit
    quiet = {"value": 0.02, "unit": "cores", "limit": 0.25}
    with_warmup(run, CAPPED | {"cost_noise": 0.087, "iterations_needed": 281, "foreign_cpu": quiet})
    out = " ".join(tbdkit("show", run.name, "-r", str(results)).stdout.split())
    assert ("its cost varied 8.7% per iteration, with other processes using 0.02 of its cores: the noise was this "
            "machine's own or the step's; at that noise the rule needs about 281 iterations") in out
    with_warmup(run, CAPPED | {"cost_noise": 0.167, "iterations_needed": None, "foreign_cpu": quiet | {"value": 0.85}})
    out = " ".join(tbdkit("show", run.name, "-r", str(results)).stdout.split())
    assert ("its cost varied 16.7% per iteration while other processes used 0.85 of the run's cores; at that noise "
            "the rule needs more than its look-back holds") in out
    assert "MAX_WARMUP_S" not in out  # no cap would let the rule end it
    # a forged warm-up record (valid JSON) is shown in words: it ended `tbdkit show` in OverflowError and ValueError
    with_warmup(run, CAPPED | {"seconds": "x", "cost_noise": 10**400, "foreign_cpu": {"value": 10**400}})
    shown = tbdkit("show", run.name, "-r", str(results))
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "warm-up capped: its time cap ended it after 99 iterations before the rule judged" in " ".join(shown.stdout.split())
    with_warmup(run, STABLE)
    out = tbdkit("show", run.name, "-r", str(results)).stdout
    assert "capped" not in out and "stable" in out


def test_the_cap_a_capped_note_offers_is_twice_the_need_at_the_warm_ups_pace():
    """What a user gives again to let the rule end a warm-up: a fixed cap with room for twice the iterations the
    rule needs at the noise recorded, at the pace the warm-up went; nothing where the iteration cap ended it or
    the need or pace is unrecorded, and a plain no where no cap may be that long."""
    from tbdkit.cli.console import warmup_why

    today = {"end_reason": "time_cap", "iterations": 61, "seconds": 45.5, "cost_noise": 0.1, "iterations_needed": 371}
    assert warmup_why(today).endswith(  # 2 x 371 x 45.5 / 61 = 553.5 s, in whole tens up
        "needs about 371 iterations; a cap with room for 2 times that, at 0.75 s an iteration: make's "
        "MAX_WARMUP_S=560 (--max-warmup-s 560)")
    assert warmup_why(today | {"iterations_needed": 3000}).endswith(
        "at 0.75 s an iteration, would be 4,480 s, more than a warm-up cap may be (3,600 s)")
    for unknown in ({"end_reason": "iteration_cap"}, {"iterations_needed": None}, {"iterations": 0},
                    {"seconds": float("nan")}, {"seconds": "45"}, {"iterations": True}):
        assert "a cap with room" not in warmup_why(today | unknown), unknown
        assert warmup_why(today | unknown).startswith("its cost varied 10.0% per iteration")
    # a damaged or forged summary (valid JSON: 400 digits, NaN, text, a list) is said in words, never a traceback
    from tbdkit.cli.console import warmup_note

    big = 10**400
    assert warmup_why(today | {"seconds": 1e308}).endswith("an iteration, would be more than a warm-up cap may be (3,600 s)")
    assert warmup_why(today | {"cost_noise": big}) == warmup_why(today | {"cost_noise": "high"}) == ""
    assert warmup_why(today | {"iterations_needed": big}) == "its cost varied 10.0% per iteration"
    for forged in ({"foreign_cpu": {"value": big, "limit": 0.25}}, {"foreign_cpu": [1]}, {"seconds": big},
                   {"iterations": big}, {"seconds": "long"}):
        note = warmup_note(today | forged)
        assert note is not None and note.startswith("warm-up capped: its time cap ended it after "), forged
        assert "its cost varied 10.0% per iteration" in note and "10000000000" not in note, (forged, note)
    assert warmup_note(today | {"iterations": big, "seconds": "long"}).startswith(
        "warm-up capped: its time cap ended it after ? iterations before the rule judged")


def smoke_policy():
    from tbdkit.spec import run_spec

    return run_spec.build(model="deepspeech2", batch_size=4, preset="smoke").measure


def first_stable(costs, policy):
    from tbdkit.core.statistics import warmup_done

    return next((n for n in range(1, len(costs) + 1)
                 if warmup_done(costs[:n], policy.warmup_window, policy.warmup_tolerance,
                                policy.min_warmup_iterations)), None)


def test_the_smoke_rule_can_end_warm_up_within_its_cap():
    """Deep Speech 2's smoke network on TensorFlow fills the 45 s cap with about 86 iterations on 2 CPU
    cores (PyTorch's with more): a settled run (1% noise) must be able to end warm-up as stable within 86,
    as it cannot with the default minimum of 100 iterations; a drift (30% above, decaying over 300
    iterations) still may not."""
    import math
    import random

    policy = smoke_policy()
    assert policy.max_warmup_s == 45.0 and policy.min_warmup_iterations < 86
    rng = random.Random(4)
    settled = [math.exp(rng.gauss(0, 0.01)) for _ in range(86)]
    n = first_stable(settled, policy)
    assert n is not None and policy.min_warmup_iterations <= n < 86, n
    drift = [(1 + 0.3 * math.exp(-i / 300)) * math.exp(rng.gauss(0, 0.01)) for i in range(86)]
    assert first_stable(drift, policy) is None


def test_the_smoke_rule_on_the_recorded_cpu_runs_ends_only_once_settled():
    """The real smoke runs of tests/fixtures/warmup (this machine, shared, 7-13% noise): the smoke rule
    never ends warm-up before their hindsight end, as the default rule does not (tests/test_stats.py)."""
    import sys
    from pathlib import Path

    folder = Path(__file__).parent / "fixtures" / "warmup"
    sys.path.insert(0, str(folder))
    import recorded

    policy = smoke_policy()
    for path in sorted(folder.glob("cpu-*.csv")):
        costs = recorded.read(path)
        n, end = first_stable(costs, policy), recorded.known_end(costs)
        assert n is None or (end is not None and n >= end), (path.name, n, end)
