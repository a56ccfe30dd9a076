"""Running a list of run specs one after another with live progress, each added to the results index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tbdkit.cli.console import RunProgress, make_progress, styled
from tbdkit.core.errors import UserError
from tbdkit.results.index import Index
from tbdkit.spec import run_spec as specs


def run_all(
    run_specs: list[specs.RunSpec], results: Path, unit: str, quiet_stdout: bool = False
) -> list[dict[str, Any]]:
    from tbdkit.launch import launch

    for s in run_specs:  # every run fits this machine before the first starts
        why = specs.fits_here(s)
        if why:
            raise UserError(f"{why}.")
    index = Index(results)
    summaries = []
    with make_progress(quiet_stdout) as progress:
        for s in run_specs:
            label = f"{s.model}/{s.framework}/b{s.batch_size}"
            outcome = launch(s, results, RunProgress(progress, label, unit))
            summary = outcome.summary
            if s.world_size > 1:
                from tbdkit.analysis.scaling import add_scaling_efficiency

                summary = add_scaling_efficiency(outcome.run_dir, index)
            index.add(outcome.run_dir)
            summaries.append(summary)
            if outcome.status == "interrupted":
                progress.console.print("interrupted: the remaining runs were not started", style="yellow")
                break
            if outcome.status == "disturbed":
                progress.console.print(
                    styled("[yellow]{}: disturbed[/]: {}", label, "; ".join(summary.get("disturbed_reasons") or [])),
                    highlight=False,
                )
            elif outcome.status != "ok":
                progress.console.print(
                    styled("[red]{}: {}[/]: {}", label, outcome.status, outcome.summary.get("error")), highlight=False
                )
    return summaries
