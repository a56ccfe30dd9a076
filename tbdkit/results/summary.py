"""summary.json, checked: the Summary model every reader goes through, and one run folder's summary.

A run's summary is written by the agent (or by the launcher when the agent died first) through `write`,
the one writer of summary.json; what only the launcher knows (a killed worker, the container's exit)
is merged into it by `record`, which writes through the same writer. Readers never
trust it raw: `read(run_dir)` validates it and raises `Unreadable` (naming the folder and the first
problems) for anything that is not a summary a kit writes, so one damaged run is listed and skipped
instead of breaking `runs`, `show` or `report` for the whole folder. Fields the kit does not know are
kept (a newer kit's additions pass through); known fields must have their types. A known number must be
finite (JSON's NaN and Infinity are not numbers the kit writes) and a throughput positive: a summary
holding anything else is unreadable, never shown as ok nor compared.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tbdkit.results import sink
from tbdkit.results.files import SUMMARY
from tbdkit.spec.run_spec import MAX_BATCH, MAX_GPUS_PER_NODE, MAX_NODES

if TYPE_CHECKING:
    from tbdkit.spec.run_spec import RunSpec


class Status(str, Enum):
    """How a run ended. A finished run is `ok`, or `disturbed` when something else competed for its machine
    in the sample window (its numbers are kept beside `disturbed_reasons`); the others carry no measurement."""

    OK = "ok"
    DISTURBED = "disturbed"
    OOM = "oom"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


MEASURED = (Status.OK.value, Status.DISTURBED.value)
STATUSES = tuple(s.value for s in Status)

# The agent's exit code for each status (the launchers read it back: 130 is Ctrl-C, 3 out of memory); any
# other status exits 1.
EXIT_CODES = {Status.OK: 0, Status.DISTURBED: 0, Status.INTERRUPTED: 130, Status.OOM: 3}


def exit_code(status: str | Status) -> int:
    """The exit code of one run that ended with `status` (the agent's)."""
    return next((code for s, code in EXIT_CODES.items() if s.value == status), 1)


def exit_code_of(statuses: Iterable[str], interrupted: bool = False) -> int:
    """The exit code of a command that made runs ending with `statuses`: 0 when every one measured, 130
    when one was interrupted or the user stopped the command (Ctrl-C, `interrupted`), 1 otherwise."""
    ended = set(statuses)
    if interrupted:
        return EXIT_CODES[Status.INTERRUPTED]
    if ended <= set(MEASURED):
        return 0
    return EXIT_CODES[Status.INTERRUPTED] if Status.INTERRUPTED.value in ended else 1


MAX_BYTES = 64 * 2**20  # far above any real summary; a bigger file is damage, not a summary


# Each model's config: unknown fields kept, known ones of their exact type, every float finite.
CHECKED = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class Metric(BaseModel):
    """One number on disk: value + unit + method, or null + reason (tbdkit.core.metric)."""

    model_config = CHECKED
    value: float | None = None
    unit: str | None = None
    method: str | None = None
    reason: str | None = None
    ci95_half_width: float | None = None
    ci95_relative: float | None = None


class Window(BaseModel):
    """The sample window (tbdkit/agent/loop.py): how many iterations, how long, why it ended."""

    model_config = CHECKED
    iterations: int
    seconds: float
    stop_reason: str
    first_iteration: int | None = None
    last_iteration: int | None = None


class Convergence(BaseModel):
    """The converge preset's outcome (tbdkit/agent/converge.py)."""

    model_config = CHECKED
    quality_metric: str | None = None
    target: float | None = None
    reached: bool | None = None
    first_quality: float | None = None
    best_quality: float | None = None
    final_quality: float | None = None
    evaluations: int | None = None


class Summary(BaseModel):
    """What the agent (tbdkit/agent/run.py) and the launcher (tbdkit/launch) write as summary.json."""

    model_config = CHECKED
    status: str
    model: str
    framework: str
    run_id: str | None = None
    error: str | None = None
    batch_size: int | None = Field(None, gt=0, le=MAX_BATCH)  # what a RunSpec allows: a larger one is no run's
    precision: str | None = None
    graph: str | None = None  # standard | compiled (unrecorded before compiled runs existed: standard)
    preset: str | None = None
    variant: str | None = None
    device: str | None = None
    data: str | None = None
    seed: int | None = None
    started_utc: str | None = None
    loop_started_utc: str | None = None  # the wall-clock time of iterations.csv's start_s = 0
    finished_utc: str | None = None
    wall_s: float | None = None
    exit_code: int | None = None
    metrics: dict[str, Metric] = {}
    warmup: dict[str, Any] | None = None
    window: Window | None = None
    convergence: Convergence | None = None
    loss: dict[str, Any] | None = None
    world_size: int | None = Field(None, ge=1, le=MAX_NODES * MAX_GPUS_PER_NODE)
    nodes: int | None = Field(None, ge=1, le=MAX_NODES)
    link_rate: str | None = None
    unstable: bool | None = None
    disturbed_reasons: list[str] | None = None

    @field_validator("metrics")
    @classmethod
    def _throughputs_positive(cls, metrics: dict[str, Metric]) -> dict[str, Metric]:
        for name, m in metrics.items():
            if name.endswith("throughput") and m.value is not None and m.value <= 0:
                raise ValueError(f"{name} is {m.value:g}, not a positive rate")
        return metrics


def start(run_id: str, spec: RunSpec, status: str, error: str | None, **more: Any) -> dict[str, Any]:
    """A run's summary as it begins, the same whoever writes it (the agent at its start, the launcher
    when the agent died before writing one): its id, status and error, what the spec asked for, then
    `more` (the agent's start time, the launcher's exit code)."""
    return {
        "run_id": run_id,
        "status": status,
        "error": error,
        "model": spec.model,
        "framework": spec.framework,
        "batch_size": spec.batch_size,
        "precision": spec.precision,
        "graph": spec.graph,
        "preset": spec.preset,
        "variant": spec.variant,
        "data": spec.data,
        "seed": spec.seed,
        **more,
    }


class Unreadable(Exception):
    """A run folder whose summary.json exists but is not a summary: `unreadable: <folder>: <why>`."""

    def __init__(self, folder: str, why: str) -> None:
        super().__init__(f"unreadable: {folder}: {why}")
        self.folder, self.why = folder, why


def why_invalid(exc: ValidationError, limit: int = 3) -> str:
    """The first few problems of a validation error, one line: 'batch_size: Input should be ...'."""
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'summary'}: {e['msg']}" for e in exc.errors()[:limit]]
    more = exc.error_count() - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def parse(text: str | bytes, folder: str) -> dict[str, Any]:
    """A summary's text as the dict a kit wrote (types checked), or Unreadable naming `folder`."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and undecodable bytes are ValueErrors
        raise Unreadable(folder, f"{SUMMARY} is not JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(data, dict):
        raise Unreadable(
            folder, f"{SUMMARY} holds {type(data).__name__ if data is not None else 'null'}, not an object"
        )
    try:
        return Summary.model_validate(data).model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise Unreadable(folder, f"{SUMMARY}: {why_invalid(exc)}") from None
    except RecursionError:
        raise Unreadable(folder, f"{SUMMARY} is nested too deeply") from None


def read(run_dir: Path) -> dict[str, Any]:
    """The checked summary of one run folder. FileNotFoundError if it has none yet (a run still
    going, or lost); Unreadable if it has one that is not a summary."""
    path = Path(run_dir) / SUMMARY
    folder = Path(run_dir).name
    try:
        if path.stat().st_size > MAX_BYTES:
            raise Unreadable(folder, f"{SUMMARY} is {path.stat().st_size:,} bytes, too large for a summary")
        text = path.read_bytes()
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise Unreadable(folder, f"{SUMMARY} is a folder, not a file") from None
    except OSError as exc:
        raise Unreadable(folder, f"{SUMMARY} cannot be read ({exc.strerror or exc})") from None
    return parse(text, folder)


def write(run_dir: Path, summary: dict[str, Any]) -> Path:
    """The one writer of summary.json: the run folder's, whole (tbdkit.core.atomic), or, where its disk
    refuses it, in the system temp folder (tbdkit.results.sink.fallback_path); returns where it landed.
    Raises OSError only when both refuse."""
    return sink.write_json_or_fallback(Path(run_dir) / SUMMARY, summary)


def record(run_dir: Path, summary: dict[str, Any], **known: Any) -> dict[str, Any]:
    """What only the launcher (or a pass after the run) knows, merged into the run's summary and written
    by `write`; `metrics` are merged metric by metric. Returns the summary as written."""
    merged = {**summary, **known}
    if "metrics" in known:
        merged["metrics"] = {**(summary.get("metrics") or {}), **known["metrics"]}
    where = write(run_dir, merged)
    if where != Path(run_dir) / SUMMARY:
        raise OSError(f"the results disk refused {SUMMARY}; it is kept at {where}")
    return merged
