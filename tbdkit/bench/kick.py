"""`tbdkit kick-the-tires`: every instrument once, inside a time budget, for an evaluator's or a researcher's
first minutes on a machine.

On a GPU (the PyTorch stack sees one), ordered by what each step is worth to a first lease: doctor, `calibrate
--quick` on the GPU, ResNet-50 at its paper preset in fp32, one Nsight Compute pass over that run (one
iteration, one launch per kernel and launch configuration), Deep Speech 2 in fp32, then amp and tf32, with capped
windows, then the report and a bundle. On a CPU: the smoke run of Deep Speech 2 on each installed (or adopted)
stack with tiny caps, one run's trace, the report and a bundle.

Each step carries the time it is assumed to take (an estimate from the CPU dry run and known H100 speeds, until
measured on the machine) and a cap; `forecast` walks the plan with those estimates under the budget, which
`--plan` prints before anything starts, and a budget that fits no measuring step is refused before anything is
installed or run. A bench step's warm-up and window caps are sized from the time the step has.

Each step is a `tbdkit` command in a process of its own, in its own process group, under one global deadline:
the measuring steps end early enough to leave the report and the bundle their reserve, a step that would get
less time than it needs is skipped (`deadline`), and a step past its time gets SIGINT (a bench marks its run
interrupted), then SIGKILL. After every step the outcomes so far are written to
RESULTS/kick-the-tires/steps.json and table.txt, so a command stopped from outside still leaves them; each
step's output is in RESULTS/kick-the-tires/logs/. The command exits non-zero when no measuring step ran.
"""

from __future__ import annotations

import errno
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tbdkit.core.errors import UserError
from tbdkit.core.paths import KIT_ROOT
from tbdkit.results import files as runfiles
from tbdkit.results import summary as summaries
from tbdkit.results.sink import read_json, write_json, write_text

DEFAULT_BUDGET_S = 420.0  # 7 minutes: the GPU plan's steps fit an H100 (those that do not are skipped, said)
FOLDER = "kick-the-tires"  # inside the results folder: steps.json, table.txt, logs/
GRACE_S = 10.0  # after SIGINT, before SIGKILL
KILL_WAIT_S = 5.0  # after SIGKILL to a step's agents, for them to be gone before their run folder is finished
MODELS = ("resnet50", "deepspeech2")
STARTUP_S = 25.0  # a bench's own start and end beside its warm-up and window: the stack's imports, the model, the files
# (model, precision, warm-up cap s, window cap s, step cap s, estimate s) in the order they run: fp32 first, the
# paper's ResNet-50 before Deep Speech 2, then the math modes. The estimates: the caps' sum on an H100 is
# what a warm-up that ends stable, a window and the start take; they are estimates until measured.
GPU_RUNS = (
    ("resnet50", "fp32", 15, 10, 75, 50),
    ("deepspeech2", "fp32", 15, 10, 75, 55),
    ("resnet50", "amp", 10, 8, 60, 45),
    ("deepspeech2", "amp", 10, 8, 60, 45),
    ("resnet50", "tf32", 10, 8, 60, 45),
    ("deepspeech2", "tf32", 10, 8, 60, 45),
)
SHORT = {"resnet50": "rn50", "deepspeech2": "ds2"}


@dataclass
class Step:
    name: str
    args: list[str] | Callable[[dict[str, Outcome]], list[str] | str]  # tbdkit's arguments, or from earlier outcomes
    cap_s: float  # at most this long
    min_s: float = 15.0  # skipped when it would get less than this
    final: bool = False  # report, bundle: they run in the reserve the measuring steps leave them
    json_stdout: bool = False  # the command prints JSON summaries on stdout (bench --json)
    what: str = ""
    estimate_s: float = 0.0  # the time it is assumed to take (an estimate until measured); 0: its cap
    measures: bool = False  # a step that measures something (calibrate, a bench, ncu): one must run
    window: tuple[float, float] | None = None  # a bench's warm-up and window caps, sized down to the time it has

    @property
    def expected_s(self) -> float:
        return self.estimate_s or self.cap_s


@dataclass
class Outcome:
    step: str
    status: str  # ok | failed | timeout | skipped
    seconds: float
    cap_s: float
    note: str = ""
    rc: int | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)  # bench steps: run id, status, throughput


def bench_args(model: str, fw: str, device: str, precision: str, warm: float, window: float, results: str) -> list[str]:
    """`tbdkit bench` of one model on one stack: the paper preset on a GPU, the smoke preset (batch 2) on a CPU.
    `{warm}` and `{window}` in the caps are sized when the step starts (size_window)."""
    preset = ["--preset", "smoke", "--batch", "2"] if device == "cpu" else ["--preset", "paper"]
    return ["bench", "--model", model, "--framework", fw, *preset, "--device", device, "--precision", precision,
            "--max-warmup-s", "{warm}", "--max-measure-s", "{window}", "--results", results]  # fmt: skip


def size_window(window: tuple[float, float], timeout_s: float) -> tuple[float, float]:
    """A bench's warm-up and window caps in the time it has: as planned where they fit beside the start, else
    both shrunk in proportion (at least 3 s each)."""
    warm, measure = window
    room = timeout_s - STARTUP_S
    if room >= warm + measure:
        return warm, measure
    scale = max(room, 6.0) / (warm + measure)
    return max(3.0, round(warm * scale, 1)), max(3.0, round(measure * scale, 1))


def plan(device: str, results: Path, frameworks: list[str]) -> list[Step]:
    """The steps for `device` ("cuda" or "cpu"), writing under `results` (absolute); the report goes to
    RESULTS-report and the bundle to RESULTS.tar.gz beside it."""
    r = str(results)
    finals = [
        Step("report", report_args(r, f"{r}-report"), 60, 5, final=True, what="figures, tables, claim checks",
             estimate_s=30),
        Step("bundle", ["bundle", r, "-o", f"{r}.tar.gz"], 40, 5, final=True, what="the artifact package",
             estimate_s=10),
    ]  # fmt: skip
    if device == "cpu":
        steps = [
            Step(f"smoke-{fw}", bench_args("deepspeech2", fw, "cpu", "fp32", 5, 5, r), 150, 30,
                 what=f"Deep Speech 2 smoke on {fw}, CPU", estimate_s=90, measures=True, window=(5, 5))
            for fw in frameworks
        ]  # fmt: skip
        steps.append(Step("trace", ["show", "last", "--results", r, "--trace"], 30, 5, what="the last run's trace",
                          estimate_s=10))  # fmt: skip
        return steps + finals
    calibrate = ["calibrate", "--quick", "--device", "cuda:0", "--results", r]
    steps = [
        Step("doctor", ["doctor", "--json"], 20, 5, json_stdout=True, what="what this machine has", estimate_s=5),
        Step("calibrate", calibrate, 90, 30, what="the instruments against known answers", estimate_s=55,
             measures=True),
    ]  # fmt: skip
    for model, precision, warm, window, cap, estimate in GPU_RUNS:
        name = f"{SHORT[model]}-{precision}"
        args = bench_args(model, frameworks[0], "cuda", precision, warm, window, r)
        steps.append(Step(name, args, cap, STARTUP_S + 6, what=f"{model} paper preset, {precision}",
                          estimate_s=estimate, measures=True, window=(warm, window)))  # fmt: skip
        if (model, precision) == ("resnet50", "fp32"):  # its profile next: worth more than the other runs
            steps.append(Step("ncu-rn50", ncu_args("rn50-fp32", results), 150, 60, estimate_s=90, measures=True,
                              what="Nsight Compute: one iteration, one launch per kernel"))  # fmt: skip
    return steps + finals


def reserve_s(steps: list[Step], budget_s: float) -> float:
    """What the measuring steps leave the final ones: their caps, at most a third of the budget."""
    return min(sum(s.cap_s for s in steps if s.final), budget_s / 3)


@dataclass
class Forecast:
    step: Step
    start_s: float  # when it is expected to start, from the clock's start
    allowed_s: float  # the time it would have: min(its cap, the time to its deadline)
    fits: bool
    why: str = ""


def forecast(steps: list[Step], budget_s: float) -> list[Forecast]:
    """The plan walked with each step's estimate under the budget, as `run` would give them time: what is
    expected to run and what the deadline is expected to skip (before anything is measured)."""
    reserve = reserve_s(steps, budget_s)
    now, out = 0.0, []
    for step in steps:
        end = budget_s if step.final else budget_s - reserve
        allowed = min(step.cap_s, end - now)
        timeout = allowed - min(GRACE_S, max(1.0, allowed / 4))
        if timeout < step.min_s:
            out.append(
                Forecast(step, now, max(0.0, allowed), False, f"deadline: {max(0.0, budget_s - now):.0f} s left")
            )
            continue
        out.append(Forecast(step, now, allowed, True))
        now += min(step.expected_s, allowed)
    return out


def plan_text(forecasts: list[Forecast], budget_s: float) -> str:
    """`--plan`: each step, when it is expected to start, the time it is assumed to take and the time it would
    have, or why the budget leaves it out."""
    head = ("step", "starts at s", "assumed s", "gets s", "what")
    rows = [
        (f.step.name, f"{f.start_s:.0f}" if f.fits else "-", f"{f.step.expected_s:.0f}",
         f"{f.allowed_s:.0f}" if f.fits else "-", f.step.what if f.fits else f"skipped, {f.why}")
        for f in forecasts
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in [head, *rows]]
    measured = [f.step.name for f in forecasts if f.fits and f.step.measures]
    lines.append(
        f"{len(measured)} measuring step(s) expected to fit in {budget_s:.0f} s; the assumed step times are estimates "
        "(from a CPU dry run and known H100 speeds), not measured on this machine"
    )
    return "\n".join(lines) + "\n"


def check_budget(budget_s: float) -> None:
    if not math.isfinite(budget_s) or budget_s <= 0:
        raise UserError(f"--budget must be a number of seconds above 0, not {budget_s:g}.")


def fits_nothing(steps: list[Step], budget_s: float) -> str | None:
    """Why a budget fits no measuring step of the plan (then nothing is installed or run), or None."""
    if any(f.fits and f.step.measures for f in forecast(steps, budget_s)):
        return None
    need = next(
        (b for b in range(int(budget_s) + 1, 3601) if any(f.fits and f.step.measures for f in forecast(steps, b))),
        None,
    )
    more = f"pass --budget {need} or more" if need is not None else "pass a larger --budget"
    return f"--budget {budget_s:g} s fits no measuring step of this plan (the report and the bundle keep their reserve): {more}."


def check_results(folder: Path) -> None:
    """kick-the-tires' results folder is, or can be made, a writable folder: else one sentence."""
    fix = "pass a writable folder with --results"
    if folder.exists() and not folder.is_dir():
        raise UserError(f"The results path {folder} is a file, not a folder: {fix}.")
    try:
        (folder / FOLDER / "logs").mkdir(parents=True, exist_ok=True)
        probe = folder / FOLDER / ".write-check"
        probe.write_bytes(b"x" * 4096)
        probe.unlink()
    except NotADirectoryError:
        raise UserError(f"A part of the results path {folder} is a file, not a folder: {fix}.") from None
    except OSError as exc:
        raise UserError(written_error(exc, folder)) from None


def written_error(exc: OSError, folder: Path) -> str:
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return f"The disk under {folder} is full ({exc.strerror}): free some space or pass another --results."
    why = "it is on read-only storage" if exc.errno == errno.EROFS else exc.strerror or str(exc)
    return f"The results folder {folder} cannot be written ({why}): pass a writable folder with --results."


def report_args(results: str, out: str) -> Callable[[dict[str, Outcome]], list[str] | str]:
    """The report over what the measuring steps made, or why there is nothing to report."""

    def args(done: dict[str, Outcome]) -> list[str] | str:
        if not any(r.get("status") in ("ok", "disturbed") for o in done.values() for r in o.runs):
            return "no run finished with numbers to report"
        return ["report", results, "--out", out]

    return args


def choose_device(device: str) -> tuple[str, str]:
    """("cuda" or "cpu", why): `auto` takes the GPU plan where the PyTorch stack itself sees a GPU (asked of
    its interpreter: a CPU-only build or a driver too old for it falls back to the CPU plan, and says so)."""
    if device == "cpu" or device.startswith("cuda"):
        return ("cpu" if device == "cpu" else "cuda"), f"--device {device}"
    from tbdkit import launch
    from tbdkit.env.machine import gpu_count

    if gpu_count() == 0:
        return "cpu", "NVML sees no GPU here"
    n, why = launch.LAUNCHERS["native"].framework_gpus("pytorch")
    if n is None:
        return "cuda", "NVML sees a GPU (the PyTorch stack is not installed yet)"
    if n == 0:
        return "cpu", f"NVML sees a GPU but the PyTorch stack does not ({why})"
    return "cuda", f"the PyTorch stack sees {n} GPU(s)"


def ncu_args(after: str, results: Path) -> Callable[[dict[str, Outcome]], list[str] | str]:
    """`reference --run` over the run step `after` made, or why there is none."""

    def args(done: dict[str, Outcome]) -> list[str] | str:
        measured = [r for r in (done[after].runs if after in done else []) if r.get("status") in ("ok", "disturbed")]
        if not measured:
            return f"{after} made no run with numbers to profile"
        return [
            "reference",
            "--run",
            str(results / str(measured[0]["run_id"])),
            "--profile-iterations",
            "1",
            "--launch-count",
            "1",
            "--ncu-warmup-s",
            "10",
            "--ncu-timeout-s",
            "{timeout}",
        ]

    return args


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # the kit that plans is the kit every step runs
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(KIT_ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("COLUMNS", "160")
    return env


def _last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def _new_specs(results: Path, since: float) -> list[Path]:
    """The spec.json of each run folder a step made (written at or after `since`)."""
    out = []
    for spec in sorted(results.glob(f"*/{runfiles.SPEC}")):
        try:
            if spec.stat().st_mtime >= since:
                out.append(spec)
        except OSError:
            continue
    return out


def _runs(results: Path, since: float) -> list[dict[str, Any]]:
    """The runs a step made, read from their folders (a bench stopped by the deadline prints nothing, but its
    run folder says `interrupted`): id, status, throughput or the error."""
    out = []
    for spec in _new_specs(results, since):
        try:
            s = read_json(spec.parent / summaries.SUMMARY)
        except (OSError, ValueError):
            out.append(
                {
                    "run_id": spec.parent.name,
                    "status": "incomplete",
                    "throughput": None,
                    "unit": None,
                    "error": "no summary.json: the run was stopped before it wrote one",
                }
            )
            continue
        tp = (s.get("metrics") or {}).get("throughput") or {}
        out.append(
            {
                "run_id": spec.parent.name,
                "status": s.get("status"),
                "throughput": tp.get("value"),
                "unit": tp.get("unit"),
                "error": s.get("error") or (", ".join(s.get("disturbed_reasons") or []) or None),
            }
        )
    return out


def _finish_stopped(results: Path, since: float, timeout_s: float) -> None:
    """The run folders a step stopped at its deadline left unfinished (its launcher killed by the SIGKILL after
    SIGINT's grace), finished as their launcher would have: summary.json (interrupted) and mllog.txt."""
    from tbdkit.launch.outcome import finish_stopped

    why = f"stopped by kick-the-tires' deadline after {timeout_s:.0f} s"
    for spec in _new_specs(results, since):
        if not (spec.parent / runfiles.MLLOG).is_file():
            finish_stopped(spec.parent, why)


def _stop(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGINT to the step's process group (a bench ends its run as interrupted), SIGKILL after `grace_s` to the
    group and to every process the step started in a session of its own (a launcher's agent, which would otherwise
    train on past the deadline, beside the next step, and rewrite its run folder after it was finished)."""
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    code = proc.poll()
    if code is None or code < 0:  # the launcher died by a signal (or lives on): its agents would live on
        _kill(tree)


def _kill(processes: list[Any]) -> None:
    """SIGKILL to each of `processes` (psutil's, which checks it is still the process it was) still running, and
    a wait until they are gone: a write a process had under way when the signal came finishes in the kernel
    first, and the run folder is finished only after."""
    import psutil

    for p in processes:
        try:
            p.kill()
        except psutil.Error:
            continue
    deadline = time.monotonic() + KILL_WAIT_S
    while any(_alive(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.05)


def _alive(process: Any) -> bool:
    """Still running, by psutil's check that the pid is the same process; a zombie (dead, not yet reaped by a
    parent that is not this process) has ended every write."""
    import psutil

    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def run_step(step: Step, args: list[str], timeout_s: float, logs: Path, results: Path) -> Outcome:
    """One step as `python -m tbdkit.cli ARGS` in its own process group, at most `timeout_s` plus the grace."""
    log, out = logs / f"{step.name}.log", logs / f"{step.name}.json"
    start, since = time.monotonic(), time.time() - 1
    grace = min(GRACE_S, max(1.0, timeout_s / 3))  # what run() kept for it
    with log.open("wb") as err, out.open("wb") if step.json_stdout else log.open("ab") as stdout:
        err.write(("$ tbdkit " + " ".join(args) + "\n").encode())
        err.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tbdkit.cli", *args],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=err,
            env=_env(),
            start_new_session=True,
        )
        try:
            rc: int | None = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc, grace)
            rc = None
    if rc is None and args[0] == "bench":  # its launcher may have been killed before it finished its run folder
        _finish_stopped(results, since, timeout_s)
    seconds = time.monotonic() - start
    runs = _runs(results, since) if args[0] == "bench" else []
    if rc is None:
        return Outcome(
            step.name, "timeout", seconds, step.cap_s, f"stopped after {timeout_s:.0f} s (the deadline)", None, runs
        )
    if rc == 0:
        note = "; ".join(_run_text(r) for r in runs) if runs else ""
        return Outcome(step.name, "ok", seconds, step.cap_s, note, rc, runs)
    failed = [r for r in runs if r.get("status") not in ("ok", "disturbed")]
    note = "; ".join(_run_text(r) for r in failed) if failed else _last_line(log)
    return Outcome(step.name, "failed", seconds, step.cap_s, note or f"exit {rc}", rc, runs)


def _run_text(r: dict[str, Any]) -> str:
    run = str(r.get("run_id") or "?")[-8:]
    if r.get("status") in ("ok", "disturbed") and r.get("throughput") is not None:
        tail = f" ({r['error']})" if r.get("status") == "disturbed" and r.get("error") else ""
        return f"{run} {r['status']}: {r['throughput']:.4g} {r.get('unit') or ''}".rstrip() + tail
    return f"{run} {r.get('status')}: {r.get('error') or 'no numbers'}"


def run(
    steps: list[Step],
    budget_s: float,
    results: Path,
    on_step: Callable[[Outcome, float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[Outcome]:
    """Run `steps` under one deadline `budget_s` from now. The measuring steps end `reserve` seconds before it
    (what the final steps need, at most a third of the budget); a step gets min(its cap, the time left to
    its deadline) less the grace its stop may take, and is skipped below its minimum. The outcomes so far
    are written after every step."""
    start = clock()
    deadline = start + budget_s
    reserve = reserve_s(steps, budget_s)
    folder = results / FOLDER
    logs = folder / "logs"
    done: dict[str, Outcome] = {}
    outcomes: list[Outcome] = []
    try:
        logs.mkdir(parents=True, exist_ok=True)
        for step in steps:
            end = deadline if step.final else deadline - reserve
            allowed = min(step.cap_s, end - clock())  # the step's stop (SIGINT, then its grace) fits inside it
            timeout = allowed - min(GRACE_S, max(1.0, allowed / 4))
            args = step.args(done) if callable(step.args) else step.args
            if isinstance(args, str):
                outcome = Outcome(step.name, "skipped", 0.0, step.cap_s, args)
            elif timeout < step.min_s:
                kept = "" if step.final else f", {reserve:.0f} s of them kept for the report and the bundle"
                left = max(0.0, deadline - clock())
                outcome = Outcome(step.name, "skipped", 0.0, step.cap_s, f"deadline: {left:.0f} s left{kept}")
            else:
                warm, window = size_window(step.window, timeout) if step.window else (0.0, 0.0)
                sized = {
                    "{timeout}": f"{max(10.0, timeout - 15):.0f}",
                    "{warm}": f"{warm:g}",
                    "{window}": f"{window:g}",
                }
                for key, value in sized.items():
                    args = [a.replace(key, value) for a in args]
                outcome = run_step(step, args, timeout, logs, results)
            done[step.name] = outcome
            outcomes.append(outcome)
            save(folder, outcomes, budget_s, clock() - start)
            if on_step is not None:
                on_step(outcome, clock() - start)
    except OSError as exc:
        raise UserError(written_error(exc, results)) from None
    return outcomes


def save(folder: Path, outcomes: list[Outcome], budget_s: float, elapsed_s: float) -> None:
    """The outcomes so far, as JSON and as the table the command prints."""
    doc = {"budget_s": budget_s, "elapsed_s": round(elapsed_s, 1), "steps": [asdict(o) for o in outcomes]}
    write_json(folder / "steps.json", doc)
    write_text(folder / "table.txt", table_text(outcomes, budget_s, elapsed_s))


def table_text(outcomes: list[Outcome], budget_s: float, elapsed_s: float) -> str:
    head = ("step", "status", "s", "cap", "what it gave, or why not")
    rows = [(o.step, o.status, f"{o.seconds:.0f}", f"{o.cap_s:.0f}", o.note) for o in outcomes]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    lines = [f"kick-the-tires: {elapsed_s:.0f} s of a {budget_s:.0f} s budget"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in [head, *rows]]
    return "\n".join(lines) + "\n"


def exit_code(outcomes: list[Outcome], steps: list[Step] | None = None) -> int:
    """1 when a step failed or nothing was measured (no measuring step ended ok, and none left a run with
    numbers: the budget skipped or stopped them all); else 0 (a step the deadline stopped or skipped beside
    measuring ones is the budget at work, said in the table)."""
    if any(o.status == "failed" for o in outcomes):
        return 1
    measuring = {s.name for s in steps if s.measures} if steps is not None else {o.step for o in outcomes}
    return 0 if any(o.step in measuring and (o.status == "ok" or _measured(o)) for o in outcomes) else 1


def _measured(o: Outcome) -> bool:
    return any(r.get("status") in ("ok", "disturbed") for r in o.runs)
