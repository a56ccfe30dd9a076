"""Running a list of run specs one after another with live progress (tbdkit.bench.progress), each added to
the results index; and gathering a Slurm job submitted with --no-wait into the same index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tbdkit.bench import progress
from tbdkit.bench.plan import check_fits
from tbdkit.launch import LAUNCHERS, Outcome, conclude, launch, slurm
from tbdkit.results.index import Index
from tbdkit.results.rundir import RunDir
from tbdkit.spec import catalog
from tbdkit.spec import run_spec as specs


def _indexed(outcome: Outcome, spec: specs.RunSpec, index: Index) -> dict[str, Any]:
    """The run's summary, with its scaling efficiency where it had several workers, added to the index."""
    summary = outcome.summary
    if spec.world_size > 1:
        from tbdkit.analysis.scaling import add_scaling_efficiency

        summary = add_scaling_efficiency(outcome.run_dir, index)
    index.add(outcome.run_dir)
    return summary


def run_all(
    run_specs: list[specs.RunSpec], results: Path, unit: str, quiet_stdout: bool = False
) -> list[dict[str, Any]]:
    check_fits(run_specs)  # every run fits this machine before the first starts
    summaries = []
    with progress.live(quiet_stdout) as notify, Index(results) as index:
        for s in run_specs:
            label = f"{s.model}/{s.framework}/b{s.batch_size}"
            try:
                outcome = launch(s, results, notify.run(label, unit))
            except slurm.Submitted as submitted:
                notify.say(
                    f"{label}: Slurm job {submitted.job.job_id} submitted; `tbdkit gather {submitted.job.job_id} "
                    f"--results {results}` finishes its run folder {submitted.run_dir.name} when it ends"
                )
                continue
            summary = _indexed(outcome, s, index)
            summaries.append(summary)
            if outcome.status == "interrupted":
                notify.say("interrupted: the remaining runs were not started", "warning")
                break
            if outcome.status == "disturbed":
                notify.say(f"{label}: disturbed: " + "; ".join(summary.get("disturbed_reasons") or []), "warning")
            elif outcome.status != "ok":
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
        outcome = conclude(spec, run_dir, code, handler, chosen)
        with Index(results) as index:
            return _indexed(outcome, spec, index)
