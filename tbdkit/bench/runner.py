"""The one runner of bench, sweep, reference and reproduce: plan, launch, index.

    checked = check(run_specs)                      # plan: every run fits this machine (fits_here), once
    with Index(results) as index:                   # one index for all the runs
        runner = Runner(results, index)             # launcher of each spec from the one registry
        outcome = runner.run(spec, on_event)        # preflight once per launcher/framework/device, launch, index

The launcher comes from tbdkit.launch's one registry (or is handed in: reference's native launcher in its own
Python); its preflight runs once per launcher, framework and device, unless the command's plan ran it already
(tbdkit.bench.plan.prepare, which can also install a stack). The launcher finishes each run folder against the
same index (a job's scaling efficiency, tbdkit.launch.conclude); the run is added to the index as it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tbdkit import launch
from tbdkit.core.errors import UserError
from tbdkit.launch.base import EventHandler, Launcher
from tbdkit.launch.outcome import Outcome
from tbdkit.results.index import Index
from tbdkit.spec.run_spec import RunSpec, fits_here


@dataclass(frozen=True)
class Checked:
    """Run specs each of which fits this machine (`check`): a runner's input, checked once."""

    specs: tuple[RunSpec, ...]

    def __iter__(self) -> Iterator[RunSpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)


def _said(n: int, why: str) -> str:
    return f"{why}."


def check(run_specs: list[RunSpec], refusal: Callable[[int, str], str] = _said) -> Checked:
    """UserError (one sentence with the fix: `refusal` of the spec's place and why) unless every run fits
    this machine (tbdkit.spec.run_spec.fits_here): checked once, before the first run starts, for bench,
    sweep and reproduce alike."""
    for n, s in enumerate(run_specs):
        why = fits_here(s)
        if why:
            raise UserError(refusal(n, why))
    return Checked(tuple(run_specs))


@dataclass
class Runner:
    """Launch each spec into `results` (or another folder, a sweep's probes) and add it to `index`.
    `launcher` replaces each spec's own; `preflighted` says the command's plan ran every preflight.
    `interrupted`: a run it launched heard a Ctrl-C (its launcher stopped the agent), in whichever phase: one
    whose sample window had ended kept what it measured, yet the user asked to stop, so a list or a sweep ends
    after that run."""

    results: Path
    index: Index
    launcher: Launcher | None = None
    preflighted: bool = False
    interrupted: bool = False
    _preflights: set[tuple[str, str, str]] = field(default_factory=set, repr=False)

    def chosen(self, spec: RunSpec) -> Launcher:
        """The spec's launcher, from the one registry (tbdkit.launch.LAUNCHERS), unless one was handed in."""
        return self.launcher or launch.LAUNCHERS[spec.launcher]

    def run(self, spec: RunSpec, on_event: EventHandler, where: Path | None = None, indexed: bool = True) -> Outcome:
        """One run to its end (tbdkit.launch.launch: its launcher's preflight the first time a launcher, framework
        and device come up, unless the plan ran it), then in the index (`indexed`; a sweep's probe is not)."""
        chosen = self.chosen(spec)
        key = (chosen.name, spec.framework, spec.device)
        first = not self.preflighted and key not in self._preflights

        def heard(event: dict[str, Any]) -> None:
            if event.get("event") == "interrupt":  # the launcher caught a Ctrl-C and stopped the agent
                self.interrupted = True
            on_event(event)

        outcome = launch.launch(spec, where or self.results, heard, chosen, preflight=first, index=self.index)
        self._preflights.add(key)
        if indexed:
            self.add(outcome)
        return outcome

    def add(self, outcome: Outcome) -> None:
        """A finished run into the index (a gathered Slurm job's too)."""
        self.index.add(outcome.run_dir)
