"""SweepSpec: a grid of runs (frameworks x precisions x batch sizes x repeats) of one model.

Validated completely before anything runs: every point of the grid becomes a RunSpec first, so
an invalid field fails as one UserError naming it and the values it allows.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tbdkit.core.errors import UserError
from tbdkit.core.paths import SWEEPS
from tbdkit.spec import catalog
from tbdkit.spec import run_spec as specs

MAX: Final = "max"
BatchEntry = int | Literal["max"]

# A probe of the max-batch search only has to show that a batch trains without running out of
# memory: one pass over the synthetic pool (every batch shape it will meet) and two measured
# iterations, not a converged sample window.
PROBE_WARMUP_CAP_S = 600.0
PROBE_MEASURE: dict[str, Any] = {"min_measure_iterations": 2, "max_measure_iterations": 2}


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str
    frameworks: list[str] = Field(min_length=1, max_length=16)
    batches: list[BatchEntry] = Field(
        min_length=1, max_length=64, description="batch sizes; 'max' is the largest that fits"
    )
    precisions: list[specs.Precision] = Field(
        default_factory=lambda: list[specs.Precision](["fp32"]), min_length=1, max_length=16
    )
    graph: specs.Graph = "standard"
    preset: specs.Preset = "smoke"
    repeat: int = Field(1, ge=1, le=100, description="runs per grid point")
    launcher: specs.Launcher = "native"
    results: Path = Path("results")
    device: str = "auto"
    data: str = "synthetic"
    seed: int = 0
    cv_limit: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="a point is unstable when the coefficient of variation "
        "of its throughput across repeats, or of one run's per-iteration throughput, exceeds this",
    )
    max_batch_limit: int = Field(4096, ge=1, le=specs.MAX_BATCH, description="the max-batch search stops doubling here")
    memory_limit_mb: int | None = Field(None, gt=0, le=specs.MAX_MEMORY_LIMIT_MB)
    measure: dict[str, Any] = Field(default_factory=dict, description="MeasurePolicy overrides")
    cpus: int | None = Field(None, ge=1, le=specs.MAX_CPUS, description="cores each run is given (RunSpec.cpus)")
    pin: bool = Field(False, description="pin each run to its cores (RunSpec.pin)")
    retry_disturbed: int = Field(
        0,
        ge=0,
        le=10,
        description="re-run a point whose run was disturbed (foreign load, "
        "another GPU process, throttling) up to this many times; every attempt is kept",
    )

    @field_validator("preset")
    @classmethod
    def _throughput_preset(cls, value: str) -> str:
        if value == "converge":
            raise ValueError(
                "a sweep measures throughput: use smoke or paper (train to a target with "
                "`tbdkit bench --preset converge`)"
            )
        return value

    @field_validator("batches")
    @classmethod
    def _batches(cls, value: list[BatchEntry]) -> list[BatchEntry]:
        bad = [b for b in value if isinstance(b, int) and not 0 < b <= specs.MAX_BATCH]
        if bad:
            raise ValueError(specs.BOUNDS["batches"])
        return list(dict.fromkeys(value))

    @field_validator("frameworks", "precisions")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))

    @property
    def int_batches(self) -> list[int]:
        return [b for b in self.batches if isinstance(b, int)]

    @property
    def wants_max(self) -> bool:
        return MAX in self.batches

    def run_spec(self, framework: str, precision: str, batch: int, probe: bool = False) -> specs.RunSpec:
        measure = dict(self.measure)
        if probe:
            pool = int(measure.get("synthetic_pool", specs.MeasurePolicy().synthetic_pool))
            measure.update(
                PROBE_MEASURE,
                min_warmup_iterations=pool,
                max_warmup_iterations=pool,
                max_warmup_s=max(float(measure.get("max_warmup_s", 0)), PROBE_WARMUP_CAP_S),
            )
        return specs.build(
            model=self.model,
            framework=framework,
            batch_size=batch,
            precision=precision,
            graph=self.graph,
            preset=self.preset,
            device=self.device,
            launcher=self.launcher,
            data=self.data,
            seed=self.seed,
            measure=measure,
            memory_limit_mb=self.memory_limit_mb,
            cpus=self.cpus,
            pin=self.pin,
        )

    def sweep_id(self) -> str:
        """Names the grid (not the repeat count or the stability limit, so a rerun with more
        repeats or another limit continues the same sweep)."""
        key = self.model_dump(mode="json", exclude={"results", "repeat", "cv_limit", "retry_disturbed"})
        for name, default in (
            ("cpus", None),
            ("pin", False),
            ("graph", "standard"),
        ):  # sweeps made before these fields keep their id
            if key.get(name) == default:
                key.pop(name)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.model}-{self.preset}-{digest}"

    def state_dir(self) -> Path:
        return self.results / SWEEPS / self.sweep_id()


@dataclass(frozen=True)
class Point:
    """One cell of the grid: batch is an int or 'max' (resolved by the search)."""

    framework: str
    precision: str
    batch: BatchEntry
    repeat: int

    @property
    def key(self) -> str:
        return f"{self.framework}/{self.precision}/b{self.batch}/r{self.repeat}"

    @property
    def group(self) -> str:
        """The point without its repeat index: the repeats' spread is computed per group."""
        return f"{self.framework}/{self.precision}/b{self.batch}"


def points(sweep: SweepSpec) -> list[Point]:
    return [
        Point(fw, p, b, r)
        for fw in sweep.frameworks
        for p in sweep.precisions
        for b in sweep.batches
        for r in range(sweep.repeat)
    ]


def parse(data: dict[str, Any]) -> SweepSpec:
    """A validated SweepSpec whose every point is a valid RunSpec, or one UserError."""
    if not isinstance(data.get("measure", {}), dict):
        raise UserError("Invalid sweep spec: measure: must be a table of MeasurePolicy fields.")
    try:
        sweep = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise UserError(specs.describe_errors(exc).replace("Invalid run spec", "Invalid sweep spec")) from None
    if sweep.model not in catalog.models():
        raise UserError(
            f"Invalid sweep spec: model: must be one of {', '.join(catalog.models())} (got {sweep.model!r})."
        )
    for fw in sweep.frameworks:
        for precision in sweep.precisions:
            for b in sweep.int_batches or [1]:
                sweep.run_spec(fw, precision, b)
    return sweep


def parse_batch_list(values: list[str]) -> list[BatchEntry]:
    out: list[BatchEntry] = []
    for v in values:
        if v.lower() == MAX:
            out.append(MAX)
            continue
        try:
            out.append(int(v))
        except ValueError:
            raise UserError(
                f"Invalid sweep spec: batches: '{v}' is neither a whole number nor 'max': "
                "pass e.g. --batch 8,16,32,max."
            ) from None
    return out
