"""`tbdkit kick-the-tires`: every instrument once, inside a time budget, for an evaluator's or a researcher's
first minutes on a machine.

On a GPU (the PyTorch stack sees one): doctor, `calibrate --quick` on the GPU, ResNet-50 and Deep Speech 2 at
their paper presets in fp32, then amp and tf32, with capped windows, one Nsight Compute pass over the ResNet-50
fp32 run (one iteration, one launch per kernel and launch configuration), then the report and a bundle. On a
CPU: every stack's smoke run of Deep Speech 2 with tiny caps, one run's trace, the report and a bundle.

Each step is a `tbdkit` command in a process of its own, in its own process group, under one global deadline:
the measuring steps end early enough to leave the report and the bundle their reserve, a step that would get
less time than it needs is skipped (`deadline`), and a step past its time gets SIGINT (a bench marks its run
interrupted), then SIGKILL. After every step the outcomes so far are written to
RESULTS/kick-the-tires/steps.json and table.txt, so a command stopped from outside still leaves them; each
step's output is in RESULTS/kick-the-tires/logs/. Missing framework stacks are installed before the clock
starts (an install is never cut short by the deadline).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tbdkit.core.paths import KIT_ROOT
from tbdkit.results import files as runfiles
from tbdkit.results import summary as summaries
from tbdkit.results.sink import read_json, write_json, write_text

DEFAULT_BUDGET_S = 420.0  # 7 minutes: the GPU plan's steps fit an H100 (those that do not are skipped, said)
FOLDER = "kick-the-tires"  # inside the results folder: steps.json, table.txt, logs/
GRACE_S = 10.0  # after SIGINT, before SIGKILL
MODELS = ("resnet50", "deepspeech2")
# (model, precision, warm-up cap s, window cap s, step cap s) in the order they run: fp32 first, the
# paper's ResNet-50 before Deep Speech 2, then the math modes
GPU_RUNS = (
    ("resnet50", "fp32", 15, 10, 90),
    ("deepspeech2", "fp32", 15, 10, 100),
    ("resnet50", "amp", 10, 8, 75),
    ("deepspeech2", "amp", 10, 8, 90),
    ("resnet50", "tf32", 10, 8, 75),
    ("deepspeech2", "tf32", 10, 8, 90),
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
    """`tbdkit bench` of one model on one stack: the paper preset on a GPU, the smoke preset (batch 2) on a CPU."""
    preset = ["--preset", "smoke", "--batch", "2"] if device == "cpu" else ["--preset", "paper"]
    return ["bench", "--model", model, "--framework", fw, *preset, "--device", device, "--precision", precision,
            "--max-warmup-s", f"{warm:g}", "--max-measure-s", f"{window:g}", "--results", results]  # fmt: skip


def plan(device: str, results: Path, frameworks: list[str]) -> list[Step]:
    """The steps for `device` ("cuda" or "cpu"), writing under `results` (absolute); the report goes to
    RESULTS-report and the bundle to RESULTS.tar.gz beside it."""
    r = str(results)
    finals = [
        Step("report", report_args(r, f"{r}-report"), 60, 5, final=True, what="figures, tables, claim checks"),
        Step("bundle", ["bundle", r, "-o", f"{r}.tar.gz"], 40, 5, final=True, what="the artifact package"),
    ]
    if device == "cpu":
        steps = [
            Step(
                f"smoke-{fw}",
                bench_args("deepspeech2", fw, "cpu", "fp32", 5, 5, r),
                150,
                30,
                what=f"Deep Speech 2 smoke on {fw}, CPU",
            )  # fmt: skip
            for fw in frameworks
        ]
        steps.append(Step("trace", ["show", "last", "--results", r, "--trace"], 30, 5, what="the last run's trace"))
        return steps + finals
    calibrate = ["calibrate", "--quick", "--device", "cuda:0", "--results", r]
    steps = [
        Step("doctor", ["doctor", "--json"], 30, 5, json_stdout=True, what="what this machine has"),
        Step("calibrate", calibrate, 120, 30, what="the instruments against known answers"),
    ]
    for model, precision, warm, window, cap in GPU_RUNS:
        name = f"{SHORT[model]}-{precision}"
        args = bench_args(model, frameworks[0], "cuda", precision, warm, window, r)
        steps.append(Step(name, args, cap, warm + window + 15, what=f"{model} paper preset, {precision}"))
        if (model, precision) == ("deepspeech2", "fp32"):  # ncu after the two fp32 runs: it needs rn50-fp32's
            steps.append(Step("ncu-rn50", ncu_args("rn50-fp32", results), 150, 60,
                              what="Nsight Compute: one iteration, one launch per kernel"))  # fmt: skip
    return steps + finals


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


def _runs(results: Path, since: float) -> list[dict[str, Any]]:
    """The runs a step made, read from their folders (a bench stopped by the deadline prints nothing, but its
    run folder says `interrupted`): id, status, throughput or the error."""
    out = []
    for spec in sorted(results.glob(f"*/{runfiles.SPEC}")):
        try:
            if spec.stat().st_mtime < since:
                continue
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


def _stop(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGINT to the step's process group (a bench ends its run as interrupted), SIGKILL after `grace_s`."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


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
    reserve = min(sum(s.cap_s for s in steps if s.final), budget_s / 3)
    folder = results / FOLDER
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    done: dict[str, Outcome] = {}
    outcomes: list[Outcome] = []
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
            args = [a.replace("{timeout}", f"{max(10.0, timeout - 15):.0f}") for a in args]
            outcome = run_step(step, args, timeout, logs, results)
        done[step.name] = outcome
        outcomes.append(outcome)
        save(folder, outcomes, budget_s, clock() - start)
        if on_step is not None:
            on_step(outcome, clock() - start)
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


def exit_code(outcomes: list[Outcome]) -> int:
    """0 unless a step failed; a step the deadline stopped or skipped is the budget at work, said in the table."""
    return 1 if any(o.status == "failed" for o in outcomes) else 0
