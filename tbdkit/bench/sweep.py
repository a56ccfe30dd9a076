"""Running a sweep: the grid of a SweepSpec through the bench machinery, resumable from disk.

The sweep's state lives in results/sweeps/<sweep-id>/sweep.json (written atomically after every
change): each point (framework, precision, batch, repeat) with its status and run id, the
max-batch searches with their probes, and each group's spread across repeats. Running the same
sweep again skips points that ended `ok` or `oom` (a batch that does not fit is a result) and
retries the others (failed, interrupted, or `running` when the sweep was killed). Each attempt is
recorded before it starts and gets its run id as soon as its folder exists, so a sweep killed
mid-run (kill -9) marks that attempt from its run folder when resumed and says so. Run
directories already on disk are only read, never written.

A Ctrl-C stops the sweep after the run it reached: the run keeps what it measured (one whose sample window had
ended keeps its status and counts as done; one stopped inside its window is `interrupted` and runs again), no
further point or probe starts, and the state's `interrupted` says where it stopped until the sweep is run again.

Probes of the max-batch search are short runs kept in results/sweeps/<sweep-id>/probes/ so they
never enter the results index beside the measured points.

One process at a time owns a sweep: it holds an advisory lock (flock) on results/sweeps/<sweep-id>/sweep.lock
from reading the state until its run ends. A second `tbdkit sweep` of the same grid is refused while the
first lives (it would take the first's live run for one killed and run its point again); the kernel drops
the lock when its owner dies, kill -9 included, so a killed sweep resumes as before.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean, stdev
from typing import Any, Protocol

from tbdkit import __version__
from tbdkit.bench import progress
from tbdkit.bench.runner import Runner as OneRunner
from tbdkit.bench.runner import check
from tbdkit.launch.base import EventHandler
from tbdkit.results import files as runfiles
from tbdkit.results import readers, sink
from tbdkit.results.index import Index
from tbdkit.results.space import check_results_folder
from tbdkit.results.summary import MEASURED
from tbdkit.spec.run_spec import RunSpec
from tbdkit.spec.sweep_spec import MAX, Point, SweepSpec, points

FORMAT = "tbdkit-sweep/1"
LOCK = "sweep.lock"  # beside sweep.json: flock'ed by the process that runs the sweep (sweep.json is replaced whole)
# Statuses a rerun keeps (a disturbed run kept its numbers; `retry_disturbed` re-runs it at once); every
# other status is retried.
FINAL = {*MEASURED, "oom"}


@dataclass(frozen=True)
class RunResult:
    status: str
    run_id: str
    run_dir: Path
    summary: dict[str, Any]
    # the user pressed Ctrl-C during this run, in whichever phase (one whose sample window had ended kept what it
    # measured and its status): the sweep stops after it
    interrupted: bool = False

    @property
    def stops_sweep(self) -> bool:
        """The sweep ends after this run: the user pressed Ctrl-C during it, or it ended interrupted."""
        return self.interrupted or self.status == "interrupted"


# Runs one spec into a results folder; `probe` says it is a max-batch probe (not indexed).
Runner = Callable[[RunSpec, Path, bool], RunResult]


class Observer(Protocol):
    def point_started(self, point: Point, batch_size: int) -> None: ...
    def point_finished(self, point: Point, status: str) -> None: ...
    def probe_started(self, framework: str, precision: str, batch_size: int) -> None: ...
    def point_retried(self, point: Point, attempt: int, of: int, reasons: list[str]) -> None: ...


class _Quiet:
    def point_retried(self, point: Point, attempt: int, of: int, reasons: list[str]) -> None: ...
    def point_started(self, point: Point, batch_size: int) -> None: ...
    def point_finished(self, point: Point, status: str) -> None: ...
    def probe_started(self, framework: str, precision: str, batch_size: int) -> None: ...


# ---------------------------------------------------------------- the max-batch search


@dataclass(frozen=True)
class MaxSearch:
    batch_size: int | None  # the largest batch that trained; None if none did
    smallest_oom: int | None
    status: str  # found | none_fit | limit | failed
    reason: str


def search_max(probe: Callable[[int], str], start: int, limit: int) -> MaxSearch:
    """The largest batch that fits: double from `start` until a probe runs out of memory (or
    `limit` is reached), then bisect between the last batch that fit and the first that did not.
    `probe(batch)` returns a run status; any status but ok/oom ends the search as failed (a disturbed
    probe trained: it counts as ok)."""
    largest_ok, smallest_oom = 0, None
    b = max(1, min(start, limit))
    while smallest_oom is None:
        status = probe(b)
        if status in MEASURED:
            largest_ok = b
            if b >= limit:
                return MaxSearch(b, None, "limit", f"batch {b} fits and is the search's limit (max_batch_limit)")
            b = min(2 * b, limit)
        elif status == "oom":
            smallest_oom = b
        else:
            return MaxSearch(
                largest_ok or None, None, "failed", f"the probe at batch {b} ended {status}, not ok or oom"
            )
    while smallest_oom - largest_ok > 1:
        mid = (largest_ok + smallest_oom) // 2
        status = probe(mid)
        if status in MEASURED:
            largest_ok = mid
        elif status == "oom":
            smallest_oom = mid
        else:
            return MaxSearch(
                largest_ok or None, smallest_oom, "failed", f"the probe at batch {mid} ended {status}, not ok or oom"
            )
    if largest_ok == 0:
        return MaxSearch(None, smallest_oom, "none_fit", "even batch 1 runs out of memory")
    return MaxSearch(
        largest_ok, smallest_oom, "found", f"batch {largest_ok} fits and batch {smallest_oom} runs out of memory"
    )


# ---------------------------------------------------------------- stability


def _cv(values: list[float]) -> float | None:
    if len(values) < 2 or fmean(values) == 0:
        return None
    return stdev(values) / fmean(values)


def throughput_of(summary: dict[str, Any]) -> float | None:
    value = ((summary.get("metrics") or {}).get("throughput") or {}).get("value")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def group_stats(entries: list[dict[str, Any]], cv_limit: float) -> dict[str, Any]:
    """Spread of one grid point across its repeats, and whether it is unstable."""
    ok = [e for e in entries if e["status"] in MEASURED and e.get("throughput") is not None]
    values = [e["throughput"] for e in ok]
    across = _cv(values)
    windows = [e["window_cv"] for e in ok if e.get("window_cv") is not None]
    reasons = []
    if across is not None and across > cv_limit:
        reasons.append(f"throughput CV across {len(values)} repeats is {across:.1%} > {cv_limit:.1%}")
    noisy = [w for w in windows if w > cv_limit]
    if noisy:
        reasons.append(
            f"{len(noisy)} run(s) have a per-iteration throughput CV above {cv_limit:.1%} (max {max(noisy):.1%})"
        )
    return {
        "runs": len(ok),
        "disturbed_runs": sum(e["status"] == "disturbed" for e in ok),
        "throughput_mean": fmean(values) if values else None,
        "throughput_stdev": stdev(values) if len(values) > 1 else None,
        "throughput_min": min(values) if values else None,
        "throughput_max": max(values) if values else None,
        "throughput_cv": across,
        "max_window_cv": max(windows) if windows else None,
        "cv_limit": cv_limit,
        "cv_method": "sample stdev / mean of the throughput across repeats; per run, of work/seconds per "
        "iteration over its sample window (iterations.csv)",
        "unstable": bool(reasons),
        "unstable_reason": "; ".join(reasons) or None,
    }


# ---------------------------------------------------------------- the state on disk


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _saved_state(path: Path) -> dict[str, Any]:
    """A sweep's saved state, or a UserError naming the file if it is damaged."""
    from tbdkit.core.errors import UserError

    try:
        data = sink.read_json(path)
    except (OSError, ValueError, RecursionError) as exc:
        data, why = None, str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
    else:
        why = "not a sweep state"
    shapes = (
        isinstance(data, dict)
        and isinstance(data.get("points", {}), dict)
        and all(
            isinstance(p, dict)
            and isinstance(p.get("attempts", []), list)
            and all(isinstance(a, dict) for a in p.get("attempts", []))
            for p in data.get("points", {}).values()
        )
        and all(isinstance(data.get(k, {}), dict) for k in ("max_batch", "groups"))
    )
    if not shapes:
        raise UserError(
            f"The sweep state {path} is damaged ({why}): move it away to run the sweep afresh "
            "(its run folders are kept)."
        )
    assert isinstance(data, dict)
    data.setdefault("points", {})
    data.setdefault("max_batch", {})
    data.setdefault("groups", {})
    return data


_OWNED: dict[Path, int] = {}  # lock file -> the descriptor whose flock makes this process the sweep's owner


def own(state_dir: Path, sweep_id: str) -> None:
    """Make this process the owner of the sweep whose state is in `state_dir`, or a UserError naming the
    live process that owns it. Held until disown() or the process's end (any end: the kernel drops it)."""
    from tbdkit.core.errors import UserError

    path = (state_dir / LOCK).absolute()
    if path in _OWNED:
        return
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the runs it starts
    except OSError as exc:
        raise UserError(
            f"The sweep's folder {state_dir} cannot be written ({exc.strerror or exc}): give --results a folder "
            "you can write to."
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        owner = os.pread(fd, 64, 0).decode(errors="replace").split()
        os.close(fd)
        raise UserError(
            f"The sweep {sweep_id} is already running in another process"
            + (f" (pid {owner[0]})" if owner and owner[0].isdigit() else "")
            + ": wait for it to end or stop it, then run the same command again to resume the sweep."
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {_now()}\n".encode(), 0)  # who owns it, for the refusal above
    _OWNED[path] = fd


def disown(state_dir: Path) -> None:
    """This process is done with the sweep: another may run it now."""
    fd = _OWNED.pop((state_dir / LOCK).absolute(), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor drops its flock


class SweepState:
    def __init__(self, sweep: SweepSpec) -> None:
        self.sweep = sweep
        self.dir = sweep.state_dir()
        self.path = self.dir / runfiles.SWEEP_STATE
        own(self.dir, sweep.sweep_id())  # before reading: a live owner's `running` attempt is not a killed one
        if self.path.is_file():
            self.data = _saved_state(self.path)
            self.data["spec"] = sweep.model_dump(mode="json")
        else:
            self.data = {
                "format": FORMAT,
                "sweep_id": sweep.sweep_id(),
                "kit_version": __version__,
                "created_utc": _now(),
                "spec": sweep.model_dump(mode="json"),
                "points": {},
                "max_batch": {},
                "groups": {},
            }
        self.recovered = self._recover_killed_attempts()
        stopped = self.data.get("interrupted")
        if isinstance(stopped, dict):  # the last run of this sweep was stopped by Ctrl-C
            self.recovered.append(
                f"{stopped.get('at')}: the sweep was stopped here (Ctrl-C); its run {stopped.get('run_id')} "
                + ("is kept" if stopped.get("kept") else "runs again")
            )
        for p in points(sweep):
            self.data["points"].setdefault(
                p.key,
                {
                    "framework": p.framework,
                    "precision": p.precision,
                    "batch": p.batch,
                    "repeat": p.repeat,
                    "batch_size": p.batch if p.batch != MAX else None,
                    "status": "pending",
                    "run_id": None,
                    "attempts": [],
                },
            )

    @property
    def points(self) -> dict[str, dict[str, Any]]:
        return self.data["points"]

    def _recover_killed_attempts(self) -> list[str]:
        """Attempts still `running` on disk were cut off by the sweep's own death (kill -9, a lost
        machine): each is marked with what its run folder says, and a sentence for the user."""
        notes = []
        for key, entry in (self.data.get("points") or {}).items():
            for attempt in entry.get("attempts") or []:
                if attempt.get("status") != "running":
                    continue
                run_id = attempt.get("run_id")
                summary = readers.summary_or_none(self.sweep.results / run_id) if run_id else None
                if summary is not None:
                    attempt.update(
                        status=summary["status"],
                        note="the sweep was killed while this run went on; its run folder has its summary",
                    )
                    entry.update(
                        status=summary["status"],
                        run_id=run_id,
                        error=summary.get("error"),
                        throughput=throughput_of(summary),
                        window_cv=readers.window_cv(self.sweep.results / run_id, summary.get("window")),
                    )
                else:
                    attempt.update(
                        status="killed",
                        note="the sweep was killed while this run went on; "
                        + ("its run folder has no summary" if run_id else "no run folder was made"),
                    )
                    entry.update(status="killed", run_id=run_id, error=attempt["note"])
                notes.append(
                    f"{key}: the sweep was killed during run {run_id or '(none started)'}, "
                    f"marked {attempt['status']}{'' if attempt['status'] in FINAL else ' (retried)'}"
                )
            if entry.get("status") == "running":  # killed before the attempt was recorded (an older kit)
                entry.update(status="killed", error="the sweep was killed while this point ran")
        return notes

    def save(self) -> None:
        self.data["updated_utc"] = _now()
        sink.write_json(self.path, self.data)

    def counts(self, keys: list[str]) -> dict[str, int]:
        out = {"done": 0, "failed": 0, "pending": 0}
        for k in keys:
            status = self.points[k]["status"]
            out["done" if status in FINAL else "pending" if status in ("pending", "running") else "failed"] += 1
        return out

    def regroup(self) -> None:
        groups: dict[str, list[dict[str, Any]]] = {}
        for p in points(self.sweep):
            groups.setdefault(p.group, []).append(self.points[p.key])
        self.data["groups"] = {}
        for key, entries in groups.items():
            first = entries[0]
            self.data["groups"][key] = {
                "framework": first["framework"],
                "precision": first["precision"],
                "batch": first["batch"],
                "batch_size": first["batch_size"],
                **group_stats(entries, self.sweep.cv_limit),
            }
        unstable = {g for g, v in self.data["groups"].items() if v["unstable"]}
        for p in points(self.sweep):
            self.points[p.key]["unstable"] = p.group in unstable


# ---------------------------------------------------------------- running it


class SweepRun:
    def __init__(self, sweep: SweepSpec, runner: Runner | None = None, observer: Observer | None = None) -> None:
        self.sweep = sweep
        self.runner = runner
        self.observer = observer or _Quiet()
        self.state = SweepState(sweep)
        self.probes_dir = self.state.dir / runfiles.PROBES
        self.interrupted = False
        self._attempt: dict[str, Any] | None = None

    def run_dir_created(self, run_dir: Path) -> None:
        """The runner made the current point's run folder: record its id before the run goes on."""
        if self._attempt is not None:
            self._attempt["run_id"] = Path(run_dir).name
            self.state.save()

    def keys(self) -> list[str]:
        return [p.key for p in points(self.sweep)]

    def run(self) -> dict[str, Any]:
        assert self.runner is not None, "SweepRun needs a runner"
        try:
            return self._run()
        finally:
            disown(self.state.dir)

    def _run(self) -> dict[str, Any]:
        self.state.data["interrupted"] = None  # this run of the sweep goes on from where the last one stopped
        self.state.regroup()
        self.state.save()
        for p in points(self.sweep):
            entry = self.state.points[p.key]
            if entry["status"] in FINAL:
                continue
            batch = p.batch if isinstance(p.batch, int) else self.max_batch(p.framework, p.precision)  # or MAX
            if self.interrupted:
                break
            if batch is None:
                entry["status"], entry["error"] = (
                    "failed",
                    self.state.data["max_batch"][f"{p.framework}/{p.precision}"]["reason"],
                )
                self.state.save()
                self.observer.point_finished(p, "failed")
                continue
            self.run_point(p, entry, batch)
            retries = 0
            while entry["status"] == "disturbed" and retries < self.sweep.retry_disturbed and not self.interrupted:
                retries += 1
                self.observer.point_retried(
                    p, retries, self.sweep.retry_disturbed, entry.get("disturbed_reasons") or []
                )
                entry["retried_disturbed"] = retries
                self.run_point(p, entry, batch)
            while p.batch == MAX and entry["status"] == "oom" and not self.interrupted:
                # The measured run needs more memory than its probe did: the search goes on below it.
                batch = self.lower_max(p.framework, p.precision, batch, entry["run_id"])
                if batch is None:
                    break
                self.run_point(p, entry, batch)
            if self.interrupted:
                break
        self.state.regroup()
        self.state.save()
        return self.state.data

    def run_point(self, p: Point, entry: dict[str, Any], batch: int) -> None:
        entry.update(status="running", batch_size=batch, started_utc=_now())
        # The attempt is on disk before it starts, and gets its run id as soon as its folder exists
        # (run_dir_created): a sweep killed meanwhile knows, when resumed, which run it left.
        attempt: dict[str, Any] = {"run_id": None, "status": "running", "batch_size": batch, "started_utc": _now()}
        entry["attempts"].append(attempt)
        self._attempt = attempt
        self.state.save()
        self.observer.point_started(p, batch)
        assert self.runner is not None
        try:
            result = self.runner(self.sweep.run_spec(p.framework, p.precision, batch), self.sweep.results, False)
        finally:
            self._attempt = None
        attempt.update(run_id=result.run_id, status=result.status)
        if result.stops_sweep:
            self.stopped(p.key, attempt, result)
        entry.update(
            status=result.status,
            run_id=result.run_id,
            error=result.summary.get("error"),
            throughput=throughput_of(result.summary),
            window_cv=readers.window_cv(result.run_dir, result.summary.get("window")),
            disturbed_reasons=result.summary.get("disturbed_reasons") or None,
        )
        if result.status == "disturbed":
            attempt["disturbed_reasons"] = result.summary.get("disturbed_reasons")
        self.state.regroup()
        self.state.save()
        self.observer.point_finished(p, result.status)

    def stopped(self, where: str, attempt: dict[str, Any], result: RunResult) -> None:
        """The user stopped the sweep (Ctrl-C) during `result`'s run: nothing more starts, and the state says
        where it stopped; the run's attempt says whether it kept a result (a rerun keeps it) or runs again."""
        self.interrupted = True
        kept = result.status in FINAL
        attempt["interrupted"] = (
            "Ctrl-C after its sample window: the run kept what it measured"
            if kept
            else f"Ctrl-C: the run ended {result.status}; it runs again when the sweep is resumed"
        )
        self.state.data["interrupted"] = {
            "at": where,
            "run_id": result.run_id,
            "status": result.status,
            "kept": kept,
            "utc": _now(),
        }

    def max_batch(self, framework: str, precision: str) -> int | None:
        """The resolved 'max' of one framework and precision, searched once and remembered."""
        searches = self.state.data["max_batch"]
        key = f"{framework}/{precision}"
        search = searches.setdefault(key, {"status": "searching", "probes": {}})
        if search["status"] in ("found", "limit", "none_fit"):
            return search["batch_size"]

        def probe(b: int) -> str:
            known = search["probes"].get(str(b)) or next(
                (
                    e
                    for e in self.state.points.values()
                    if e["batch"] == b
                    and e["status"] in FINAL
                    and (e["framework"], e["precision"]) == (framework, precision)
                ),
                None,
            )
            if known and known["status"] in FINAL:
                return str(known["status"])
            self.observer.probe_started(framework, precision, b)
            assert self.runner is not None
            result = self.runner(self.sweep.run_spec(framework, precision, b, probe=True), self.probes_dir, True)
            search["probes"][str(b)] = {
                "status": result.status,
                "run_id": result.run_id,
                "error": result.summary.get("error"),
            }
            if result.stops_sweep:
                self.stopped(f"max-batch search {key}, probe at batch {b}", search["probes"][str(b)], result)
                self.state.save()
                return "interrupted"  # the search ends here; a probe that finished is reused when resumed
            self.state.save()
            return result.status

        start = max(self.sweep.int_batches, default=0) or self.default_batch()
        found = search_max(probe, start, self.sweep.max_batch_limit)
        search.update(
            status=found.status if not self.interrupted else "interrupted",
            batch_size=found.batch_size,
            smallest_oom=found.smallest_oom,
            reason=found.reason,
            start=start,
            limit=self.sweep.max_batch_limit,
            method="double from the start batch until out of memory, then bisect (short probe runs in "
            "probes/: one pass over the synthetic pool and 2 measured iterations)",
        )
        self.state.save()
        return found.batch_size if found.status in ("found", "limit") else None

    def lower_max(self, framework: str, precision: str, batch: int, run_id: str) -> int | None:
        search = self.state.data["max_batch"][f"{framework}/{precision}"]
        search["probes"][str(batch)] = {
            "status": "oom",
            "run_id": run_id,
            "error": "the measured run at this batch ran out of memory (its probe had not)",
            "superseded": search["probes"].get(str(batch)),
        }
        search["status"] = "searching"
        return self.max_batch(framework, precision)

    def default_batch(self) -> int:
        from tbdkit.spec import catalog

        return int(catalog.get(self.sweep.model).hp(self.sweep.preset)["default_batch"])


# ---------------------------------------------------------------- through the launchers, shown as it goes


class Shown:
    """The sweep's Observer on the user's display (tbdkit.bench.progress): the grid's bar (points done /
    failed / pending) above one bar per run."""

    def __init__(self, notify: progress.Notifier, run: SweepRun, unit: str) -> None:
        self.notify = notify
        self.run = run
        self.unit = unit
        keys = run.keys()
        self.bar = notify.bar(f"sweep of {len(keys)} points", len(keys), run.state.counts(keys)["done"])
        self.bar.update(phase=self._phase(), note="")

    def _phase(self) -> str:
        c = self.run.state.counts(self.run.keys())
        return f"done {c['done']} · failed {c['failed']} · pending {c['pending']}"

    def handler(self, label: str) -> EventHandler:
        return self.notify.run(label, self.unit)

    def point_started(self, point: Point, batch_size: int) -> None:
        self.bar.update(phase=self._phase(), note=f"now {point.key} (batch {batch_size})")

    def point_finished(self, point: Point, status: str) -> None:
        self.bar.update(advance=1, phase=self._phase(), note="")
        if status not in FINAL:
            self.notify.say(f"{point.key}: {status} (retried when the sweep is run again)", "error")

    def point_retried(self, point: Point, attempt: int, of: int, reasons: list[str]) -> None:
        self.notify.say(
            f"{point.key}: disturbed ({'; '.join(reasons) or 'flagged'}): re-running it (retry {attempt} of "
            f"{of}, --retry-disturbed); the disturbed run is kept",
            "warning",
        )

    def probe_started(self, framework: str, precision: str, batch_size: int) -> None:
        self.bar.update(note=f"max-batch search {framework}/{precision}: probing batch {batch_size}")


def bench_runner(runner: OneRunner, shown: Shown, run_dir_created: Callable[[Path], None] | None = None) -> Runner:
    """Each point through the one runner (tbdkit.bench.runner: the spec's launcher, then the results index,
    one for the whole sweep; a probe is not indexed). `run_dir_created` hears each measured point's run
    folder as soon as the launcher makes it."""

    def run(spec: RunSpec, where: Path, probe: bool) -> RunResult:
        label = f"{'probe ' if probe else ''}{spec.framework}/{spec.precision}/b{spec.batch_size}"
        show = shown.handler(label)

        def handler(event: dict[str, Any]) -> None:
            if event.get("event") == "run_dir":
                if run_dir_created is not None and not probe:
                    run_dir_created(Path(event["run_dir"]))
                return
            show(event)

        outcome = runner.run(spec, handler, where, indexed=not probe)
        return RunResult(outcome.status, outcome.run_id, outcome.run_dir, outcome.summary, runner.interrupted)

    return run


def run_sweep(spec: SweepSpec, unit: str, quiet_stdout: bool = False, preflighted: bool = False) -> dict[str, Any]:
    """Run (or resume) the sweep with live progress; returns its state, which the results index holds too.
    The sweep's state is written before any run: a read-only, full or mistaken results path fails first.
    `preflighted`: the command's plan ran the launcher's preflights (tbdkit.bench.plan.prepare)."""
    first = (spec.int_batches or [1])[0]
    check([spec.run_spec(fw, precision, first) for fw in spec.frameworks for precision in spec.precisions])
    check_results_folder(spec.results, spec.run_spec(spec.frameworks[0], spec.precisions[0], first))
    run = SweepRun(spec)
    with progress.live(quiet_stdout, eta=True) as notify, Index(spec.results) as index:
        shown = Shown(notify, run, unit)
        one = OneRunner(spec.results, index, preflighted=preflighted)
        run.runner, run.observer = bench_runner(one, shown, run.run_dir_created), shown
        for note in run.state.recovered:
            notify.say(f"resuming: {note}", "warning")
        counts = run.state.counts(run.keys())
        if counts["done"] or counts["failed"]:
            notify.say(
                f"resuming sweep {spec.sweep_id()}: {counts['done']} point(s) done are kept, "
                f"{counts['failed']} failed and {counts['pending']} pending will run"
            )
        try:
            return run.run()
        finally:
            index.add_sweep(run.state.data)
