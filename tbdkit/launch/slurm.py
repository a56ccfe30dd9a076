"""The Slurm launcher: the run's job rendered as an sbatch file (tbdkit.launch.render), submitted with
`sbatch`, followed until it ends and its run folder finished here as every launcher's is.

The run folder is made in the results folder, which must be on a file system the nodes share (the
job writes into it where it runs); the job file, its spec.json and Slurm's output file are kept beside
it in <results>/.slurm/<run id>/. While the job runs, its output file is read as a local run's stdout
is: the agent's event lines drive the same live progress, every other line goes to log.txt. The job's
end comes from `squeue`, its state and reason from `scontrol show job` (held for MinJobAge after the
end) or `sacct` (where accounting is kept): a job Slurm ended (time limit, node failure, preemption,
out of memory) says so in its summary. Ctrl-C stops the agents as a local Ctrl-C does (`scancel
--signal=INT --full`), then cancels the job (`scancel`) if it has not ended after a grace; a second
Ctrl-C cancels at once. Settings (partition, account, time limit, extra sbatch options, a container
image through pyxis) come from slurm.toml and the command's flags (SlurmOptions)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tbdkit.core.errors import UserError
from tbdkit.core.user_files import load_toml, tomllib
from tbdkit.env import stacks
from tbdkit.launch import render
from tbdkit.launch.base import Busy, EventHandler, parse_event, quiet
from tbdkit.launch.native import StackLauncher
from tbdkit.launch.outcome import _write_mllog
from tbdkit.results import summary as summaries
from tbdkit.results.rundir import RunDir
from tbdkit.spec.run_spec import RunSpec

CONFIG = Path("slurm.toml")  # read from the folder the command runs in; $TBDKIT_SLURM_CONFIG names another
POLL_S = 1.0
CANCEL_GRACE_S = 30.0  # after the first Ctrl-C: the agents' clean stop before the job is cancelled
SUBMIT_FOLDER = ".slurm"  # <results>/.slurm/<run id>/: the job file, its spec.json, Slurm's output
COMMANDS = ("sbatch", "squeue", "scontrol", "scancel")
INTERRUPTED = summaries.exit_code(summaries.Status.INTERRUPTED)  # the agent's, and a job cancelled here
# Slurm's own ends of a job: the state, what the summary's status becomes, and the sentence that says why.
KILLED = {
    "TIMEOUT": ("failed", "its time limit ran out"),
    "NODE_FAIL": ("failed", "a node of the job failed"),
    "PREEMPTED": ("failed", "it was preempted"),
    "OUT_OF_MEMORY": ("oom", "a node ran out of memory"),
    "BOOT_FAIL": ("failed", "a node failed to boot"),
    "DEADLINE": ("failed", "its deadline passed"),
    "CANCELLED": ("failed", "it was cancelled outside this command (scancel or an administrator)"),
}
ENDED = {"COMPLETED", "FAILED", *KILLED}
_TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$|^\d+-\d+$")
_KEY = re.compile(r"(\w+)=(\S*)")


@dataclass(frozen=True)
class SlurmOptions:
    """A job's sbatch settings: slurm.toml's keys, each also a flag of `tbdkit bench` and `tbdkit sweep`."""

    partition: str | None = None
    account: str | None = None
    time: str = "01:00:00"  # sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]
    cpus_per_task: int | None = None  # default: 8 per GPU, one per worker on the CPU
    gpus: bool | None = None  # request --gpus-per-node (default: unless --device cpu)
    options: tuple[str, ...] = ()  # more sbatch options, each one line: "--qos=high", "--constraint=h100"
    container_image: str | None = None  # run the framework image through pyxis/enroot (untested here)
    python: str | None = None  # the stack's interpreter on the nodes (default: this checkout's .venvs)
    wait: bool = True  # False: submit and return (`tbdkit gather JOBID` finishes the run later)

    def checked(self) -> SlurmOptions:
        if not _TIME.match(self.time):
            raise UserError(
                f"Slurm time limit {self.time!r} is not one sbatch reads: pass minutes, MM:SS, HH:MM:SS or D-HH:MM:SS."
            )
        for option in self.options:
            if not option.startswith("-") or any(ord(c) < 32 for c in option):
                raise UserError(
                    f"The sbatch option {option!r} must be one option on one line starting with '-', e.g. --qos=high."
                )
        if self.cpus_per_task is not None and self.cpus_per_task < 1:
            raise UserError("cpus_per_task must be a whole number of cores from 1.")
        return self

    def values(self, spec: RunSpec, output: str) -> dict[str, object]:
        """The template's settings (tbdkit.launch.render, slurm-native.sbatch.j2)."""
        gpus = self.gpus if self.gpus is not None else spec.device != "cpu"
        per_node = render.CPUS_PER_GPU * spec.gpus_per_node if gpus else spec.gpus_per_node
        head = [f"--partition={self.partition}"] if self.partition else []
        head += [f"--account={self.account}"] if self.account else []
        return {
            "time_limit": self.time,
            "gpus": gpus,
            "cpus_per_task": self.cpus_per_task or per_node,
            "sbatch_options": [*head, *self.options],
            "output": output,
        }


def load_options(path: Path | None = None, **flags: Any) -> SlurmOptions:
    """slurm.toml (or `path`, or $TBDKIT_SLURM_CONFIG) where it exists, then the flags that were given."""
    path = path or Path(os.environ.get("TBDKIT_SLURM_CONFIG", CONFIG))
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            data = load_toml(path)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise UserError(f"{path} cannot be read as TOML ({exc}): fix it or remove it.") from None
    known = {f.name for f in fields(SlurmOptions)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UserError(f"{path}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(sorted(known))}.")
    data.update({k: v for k, v in flags.items() if v is not None and v != ()})
    if "options" in data:
        data["options"] = tuple(data["options"])
    try:
        return SlurmOptions(**data).checked()
    except TypeError as exc:
        raise UserError(f"{path}: {exc}") from None


@dataclass
class Job:
    """One submitted job: its id, its submission folder and what `scontrol`/`sacct` said at its end."""

    job_id: str
    folder: Path
    state: str = "PENDING"
    reason: str | None = None
    exit_code: str | None = None
    nodes: str | None = None
    time_limit: str | None = None
    cancelled: bool = False  # by this command (Ctrl-C)

    def record(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "nodes": self.nodes,
            "time_limit": self.time_limit,
        }


def _run(cmd: list[str], check: bool = True) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise UserError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip() or proc.stdout.strip()}.")
    return proc.stdout


def preflight() -> None:
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise UserError(
            f"--launcher slurm needs Slurm's client commands ({', '.join(missing)} not found): run on a "
            "cluster's login node, or install slurm-client."
        )


def submit_folder(run_dir: Path) -> Path:
    return run_dir.parent / SUBMIT_FOLDER / run_dir.name


def submit(spec: RunSpec, run_dir: Path, options: SlurmOptions) -> Job:
    """Render the run's job beside its run folder and submit it; the job's id is kept there too."""
    folder = submit_folder(run_dir)
    output = folder / "slurm-%j.out"
    path = render.write(
        spec,
        "slurm",
        folder,
        image=options.container_image,
        results=str(run_dir.parent.resolve()),
        run_id=run_dir.name,
        python=options.python,
        native=options.container_image is None,
        slurm=options.values(spec, str(output.resolve())),
    )
    env = {k: v for k, v in stacks.agent_env().items() if k != "TBDKIT_LAUNCHER_PID"}
    proc = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={folder.resolve()}", str(path.resolve())],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise UserError(f"sbatch refused the job ({proc.stderr.strip()}): fix slurm.toml or the flags and run again.")
    job_id = proc.stdout.strip().split(";")[0]
    (folder / "job_id").write_text(job_id + "\n")
    with RunDir(run_dir).log.open("a") as log:
        log.write(f"# Slurm job {job_id}: sbatch {path}\n")
    return Job(job_id, folder)


def query(job: Job) -> bool:
    """Whether the job has ended; at its end, its state, reason, exit code and nodes are read into `job`."""
    state = _run(["squeue", "-h", "-j", job.job_id, "-o", "%T"], check=False).strip()
    if state and state.split()[0] not in ENDED and not state.startswith("COMPLETING"):
        job.state = state.split()[0]
        return False
    text = _run(["scontrol", "show", "job", "-o", job.job_id], check=False)
    fields_ = dict(_KEY.findall(text))
    if "JobState" in fields_:
        if fields_["JobState"] not in ENDED:
            return False
        job.state, job.reason = fields_["JobState"], fields_.get("Reason")
        job.exit_code, job.nodes, job.time_limit = (
            fields_.get("ExitCode"),
            fields_.get("NodeList"),
            fields_.get("TimeLimit"),
        )
        return True
    line = _run(
        ["sacct", "-n", "-P", "-X", "-j", job.job_id, "-o", "State,Reason,ExitCode,NodeList,Timelimit"], check=False
    ).strip()
    if not line:
        return not state  # gone from the queue and from the controller's memory, no accounting: over
    state_, reason, code, nodes, limit = (line.splitlines()[0].split("|") + [""] * 5)[:5]
    job.state = state_.split()[0]
    if job.state not in ENDED:
        return False
    job.reason, job.exit_code, job.nodes, job.time_limit = reason or None, code, nodes, limit
    return True


def exit_code(job: Job) -> int:
    """The job's exit code as a launcher returns the agent's: 0, the script's code, -signal, 130 if cancelled here."""
    if job.cancelled:
        return INTERRUPTED
    if job.state == "COMPLETED":
        return 0
    code, _, sig = (job.exit_code or "1:0").partition(":")
    return (
        -int(sig) if sig.isdigit() and int(sig) and not int(code) else int(code) if code.isdigit() and int(code) else 1
    )


class Follower:
    """Reads the job's output file as it grows: events to `on_event`, other lines to log.txt."""

    def __init__(self, job: Job, run_dir: Path, on_event: EventHandler) -> None:
        self.job, self.log, self.on_event = job, RunDir(run_dir).log, on_event
        self.offset, self.partial = 0, ""

    def read(self) -> None:
        path = self.job.folder / f"slurm-{self.job.job_id}.out"
        try:
            with path.open(errors="replace") as f:
                f.seek(self.offset)
                text = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        with self.log.open("a") as log:
            for line in lines:
                event = parse_event(line)
                if event is None:
                    log.write(line + "\n")
                else:
                    self.on_event(event)


def follow(job: Job, run_dir: Path, on_event: EventHandler) -> int:
    """Until the job ends: its output as a local run's, Ctrl-C as a local Ctrl-C; then its exit code."""
    reader = Follower(job, run_dir, on_event)
    on_event({"event": "phase", "phase": "queued"})
    started, cancel_at = False, None
    while True:
        try:
            ended = query(job)
            reader.read()
            if not started and job.state == "RUNNING":
                started = True
                on_event({"event": "phase", "phase": "starting"})
            if ended:
                time.sleep(POLL_S)  # the last lines a node wrote reach the shared file system
                reader.read()
                return exit_code(job)
            if cancel_at is not None and time.monotonic() > cancel_at:
                _run(["scancel", job.job_id], check=False)
                cancel_at = None
            time.sleep(POLL_S)
        except KeyboardInterrupt:
            on_event({"event": "interrupt"})
            if job.cancelled:  # a second Ctrl-C: at once
                _run(["scancel", job.job_id], check=False)
            else:
                job.cancelled = True
                _run(["scancel", "--signal=INT", "--full", job.job_id], check=False)
                cancel_at = time.monotonic() + CANCEL_GRACE_S


def verdict(job: Job, summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with the job's record, and the reason where Slurm (or this command's Ctrl-C) ended it."""
    summary = {**summary, "slurm": job.record()}
    if job.cancelled:
        return {**summary, "status": "interrupted", "error": f"cancelled with Ctrl-C (scancel {job.job_id})"}
    if job.state in KILLED:
        status, why = KILLED[job.state]
        detail = f"; time limit {job.time_limit}" if job.state == "TIMEOUT" and job.time_limit else ""
        reason = f", reason {job.reason}" if job.reason and job.reason != "None" else ""
        before = f"; before that: {summary['error']}" if summary.get("error") else ""
        error = f"Slurm ended job {job.job_id} ({job.state}{reason}{detail}): {why}{before}"
        return {**summary, "status": status, "error": error}
    return summary


@dataclass
class SlurmLauncher(StackLauncher):
    """The launcher (tbdkit.launch.base.Launcher) of a job submitted to Slurm: the nodes run the framework
    stack's virtual environment from a shared path (or the framework image through pyxis)."""

    name = "slurm"
    config: Path | None = None  # the settings file the command named (default: slurm.toml, see load_options)
    flags: dict[str, Any] = field(default_factory=dict)  # the command's flags, over the file's keys
    jobs: dict[Path, Job] = field(default_factory=dict)

    def configure(self, config: Path | None = None, **flags: Any) -> None:
        """The command's settings, read (and checked) when a job is rendered: a bench on another launcher
        never reads slurm.toml."""
        self.config, self.flags = config, flags

    @property
    def options(self) -> SlurmOptions:
        return load_options(self.config, **self.flags)

    def framework_gpus(self, framework: str) -> tuple[int | None, str | None]:
        return None, None  # the nodes' GPUs, not this machine's: not asked before the job runs

    def preflight(self, framework: str, device: str, setup: bool = False, busy: Busy = quiet) -> None:
        """Slurm's commands, then the framework's stack (the shared one the nodes run), unless they run an image."""
        preflight()
        if self.options.container_image is None and self.options.python is None:
            super().preflight(framework, device, setup, busy)

    def run(self, spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int:
        job = submit(spec, run_dir, self.options)
        self.jobs[run_dir] = job
        if not self.options.wait:
            raise Submitted(job, run_dir)
        return follow(job, run_dir, on_event)

    def finish(
        self, spec: RunSpec, run_dir: Path, exit_code: int, summary: dict[str, Any], by_agent: bool
    ) -> dict[str, Any]:
        job = self.jobs.pop(run_dir, None)
        if job is None:
            return summary
        summary = summaries.record(run_dir, verdict(job, summary))
        _write_mllog(run_dir, spec, summary, None)
        return summary


class Submitted(UserError):
    """--no-wait: the job is submitted and the command returns; `tbdkit gather JOBID` finishes it. `tbdkit bench`
    says so and goes on; any other command stops with this sentence (a sweep follows its points' jobs)."""

    def __init__(self, job: Job, run_dir: Path) -> None:
        super().__init__(
            f"Slurm job {job.job_id} was submitted without waiting (--no-wait, or wait = false in slurm.toml): "
            f"`tbdkit gather {job.job_id} --results {run_dir.parent}` finishes its run folder; set wait = true "
            "for a sweep."
        )
        self.job, self.run_dir = job, run_dir


def find_job(results: Path, job_id: str) -> tuple[Path, Job]:
    """The run folder a job submitted with --no-wait writes, from the id kept beside it."""
    for kept in sorted((results / SUBMIT_FOLDER).glob("*/job_id")):
        if kept.read_text().strip() == job_id:
            return results / kept.parent.name, Job(job_id, kept.parent)
    raise UserError(
        f"No job {job_id} was submitted into {results}: pass the --results the bench used "
        f"(its {SUBMIT_FOLDER}/<run id>/job_id files name the jobs)."
    )
