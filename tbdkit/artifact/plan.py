"""What `tbdkit reproduce` is about to run, said before it runs: each run of the bundle with its caps
and how long it took where it was recorded, and the time the whole list should take here.

A bundle's specs are already bounded (tbdkit.spec.run_spec: caps of an hour, batches, workers); the
plan says what they add up to, and each run is checked against this machine (its workers against
these cores or GPUs) before anything is asked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tbdkit.bench.runner import Checked, check
from tbdkit.spec import catalog
from tbdkit.spec import run_spec as specs


@dataclass(frozen=True)
class PlannedRun:
    recorded_run: str
    spec: specs.RunSpec
    recorded_wall_s: float | None  # how long the run took where it was recorded (summary.json's wall_s)

    @property
    def caps_s(self) -> float:
        """The longest its training may go on: warm-up and window caps, or the converge preset's max_train_s."""
        if self.spec.preset == "converge":
            hp = catalog.get(self.spec.model).hp(self.spec.preset, self.spec.variant)
            return float(hp.get("max_train_s") or 0.0)
        return self.spec.measure.longest_warmup_s + self.spec.measure.max_measure_s

    @property
    def caps_text(self) -> str:
        if self.spec.preset == "converge":
            return f"training <= {self.caps_s:,.0f} s (max_train_s)"
        m = self.spec.measure
        return f"warm-up <= {m.longest_warmup_s:,.0f} s, window <= {m.max_measure_s:,.0f} s"

    @property
    def expected_s(self) -> float:
        """The recorded wall time where there is one, else the caps."""
        return self.recorded_wall_s if self.recorded_wall_s is not None else self.caps_s


@dataclass(frozen=True)
class Plan:
    runs: list[PlannedRun]
    checked: Checked  # every run fits this machine (tbdkit.bench.runner.check), handed to the runner as it is

    @property
    def expected_s(self) -> float:
        return sum(r.expected_s for r in self.runs)

    @property
    def caps_s(self) -> float:
        return sum(r.caps_s for r in self.runs)

    @property
    def recorded_all(self) -> bool:
        return all(r.recorded_wall_s is not None for r in self.runs)

    def total_text(self) -> str:
        expected = _duration(self.expected_s)
        how = (
            "as long as the runs took where they were recorded"
            if self.recorded_all
            else "the recorded wall times, and the caps of runs that recorded none"
        )
        return (
            f"{len(self.runs)} run(s), about {expected} ({how}); their caps allow {_duration(self.caps_s)} of "
            "training in all, setup and analyses on top"
        )


def _wall(summary: dict[str, Any]) -> float | None:
    value = summary.get("wall_s")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:,.0f} min"
    return f"{seconds / 3600:,.1f} h"


def plan(recorded: list[tuple[dict[str, Any], dict[str, Any]]], run_specs: list[specs.RunSpec]) -> Plan:
    """The runs `reproduce` would make; a UserError naming the first that cannot run on this machine."""
    ids = [str(summary.get("run_id")) for _, summary in recorded]
    checked = check(run_specs, lambda n, why: f"The bundle's run {ids[n]} cannot run here: {why}.")
    runs = [PlannedRun(run_id, spec, _wall(summary)) for run_id, spec, (_, summary) in zip(ids, run_specs, recorded)]
    return Plan(runs, checked)
