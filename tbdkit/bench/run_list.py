"""Running a list of run specs one after another with live progress (tbdkit.bench.progress) through the one
runner (tbdkit.bench.runner: checked, launched, indexed); and gathering a Slurm job submitted with --no-wait
into the same index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tbdkit.bench import progress
from tbdkit.bench.runner import Checked, Runner, check
from tbdkit.launch import LAUNCHERS, conclude, slurm
from tbdkit.results.index import Index
from tbdkit.results.rundir import RunDir
from tbdkit.results.summary import Status
from tbdkit.spec import catalog
from tbdkit.spec import run_spec as specs


class Summaries(list[dict[str, Any]]):
    """The runs' summaries, in order; `interrupted`: the user stopped the list (Ctrl-C), in whichever phase the
    last run was (one whose sample window had ended finishes with the status it measured)."""

    interrupted: bool = False


def run_all(
    run_specs: list[specs.RunSpec] | Checked,
    results: Path,
    unit: str | None = None,
    quiet_stdout: bool = False,
    preflighted: bool = False,
) -> Summaries:
    """Each run to its end, in order, and its summary; `run_specs` checked here unless the caller's plan did
    (tbdkit.bench.runner.check); `unit`: the throughput's, else each model's; `preflighted`: the caller's plan ran
    the launchers' preflights. A Ctrl-C ends the list after the run it reached."""
    checked = run_specs if isinstance(run_specs, Checked) else check(run_specs)  # before the first starts
    summaries = Summaries()
    with progress.live(quiet_stdout) as notify, Index(results) as index:
        runner = Runner(results, index, preflighted=preflighted)
        for s in checked.specs:
            label = f"{s.model}/{s.framework}/b{s.batch_size}"
            try:
                outcome = runner.run(s, notify.run(label, unit or catalog.get(s.model).throughput_unit))
            except slurm.Submitted as submitted:
                notify.say(
                    f"{label}: Slurm job {submitted.job.job_id} submitted; `tbdkit gather {submitted.job.job_id} "
                    f"--results {results}` finishes its run folder {submitted.run_dir.name} when it ends"
                )
                continue
            summary = outcome.summary
            summaries.append(summary)
            if outcome.status == Status.INTERRUPTED or runner.interrupted:
                summaries.interrupted = True
                notify.say("interrupted: the remaining runs were not started", "warning")
                break
            if outcome.status == Status.DISTURBED:
                notify.say(f"{label}: disturbed: " + "; ".join(summary.get("disturbed_reasons") or []), "warning")
            elif outcome.status != Status.OK:
                notify.say(f"{label}: {outcome.status}: {outcome.summary.get('error')}", "error")
    return summaries


def gather(job_id: str, results: Path, quiet_stdout: bool = False) -> dict[str, Any]:
    """A Slurm job submitted with --no-wait: followed to its end (at once if it ended), its run folder
    finished as a followed job's is, and indexed."""
    run_dir, job = slurm.find_job(results, job_id)
    slurm.preflight()
    spec = specs.load(RunDir(run_dir).spec)
    chosen = LAUNCHERS["slurm"]
    assert isinstance(chosen, slurm.SlurmLauncher)
    with progress.live(quiet_stdout) as notify:
        unit = catalog.get(spec.model).throughput_unit
        handler = notify.run(f"{spec.model}/{spec.framework}/b{spec.batch_size}", unit)
        chosen.jobs[run_dir] = job
        code = slurm.follow(job, run_dir, handler)
        with Index(results) as index:
            outcome = conclude(spec, run_dir, code, handler, chosen, index)
            Runner(results, index, chosen, preflighted=True).add(outcome)
            return outcome.summary
