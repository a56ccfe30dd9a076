"""Running a list of run specs one after another with live progress (tbdkit.bench.progress), each added to
the results index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tbdkit.bench import progress
from tbdkit.bench.plan import check_fits
from tbdkit.launch import launch
from tbdkit.results.index import Index
from tbdkit.spec import run_spec as specs


def run_all(
    run_specs: list[specs.RunSpec], results: Path, unit: str, quiet_stdout: bool = False
) -> list[dict[str, Any]]:
    check_fits(run_specs)  # every run fits this machine before the first starts
    summaries = []
    with progress.live(quiet_stdout) as notify, Index(results) as index:
        for s in run_specs:
            label = f"{s.model}/{s.framework}/b{s.batch_size}"
            outcome = launch(s, results, notify.run(label, unit))
            summary = outcome.summary
            if s.world_size > 1:
                from tbdkit.analysis.scaling import add_scaling_efficiency

                summary = add_scaling_efficiency(outcome.run_dir, index)
            index.add(outcome.run_dir)
            summaries.append(summary)
            if outcome.status == "interrupted":
                notify.say("interrupted: the remaining runs were not started", "warning")
                break
            if outcome.status == "disturbed":
                notify.say(f"{label}: disturbed: " + "; ".join(summary.get("disturbed_reasons") or []), "warning")
            elif outcome.status != "ok":
                notify.say(f"{label}: {outcome.status}: {outcome.summary.get('error')}", "error")
    return summaries
