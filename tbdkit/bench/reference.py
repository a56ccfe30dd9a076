"""tbdkit reference (or python -m tbdkit.bench.reference): reference results on one GPU, in one command.

For each model (default: Deep Speech 2 and ResNet-50; --suite: every model of the suite; PyTorch,
paper preset) at two batch sizes (the preset's default and the one below it, or above it where
none is below):
  1. a measured run with every analysis on: throughput, NVML and trace GPU utilization, GPM pipes,
     memory.json, kernels.csv, model FLOPs and MFU;
  2. a separate Nsight Compute pass (the native launcher with ncu in front of the agent) over a
     few iterations after warm-up (never during the timed run) that samples a few launches of each kernel and launch configuration; the samples are
     weighted by the measured run's kernel timeline (kernel_launches.csv: calls and time of every
     kernel of the traced iterations), so FP32 utilization (paper eq. 2) and tensor-pipe
     utilization, overall and per kernel, cover the whole iteration; merged into that run's
     kernels.csv and summary.json with the share of kernel time the samples cover;
  3. summary.json, env.json, spec.json, iterations.csv, memory.json, kernels.csv (and ncu_raw.csv) copied into
     workloads/<model>/reference/b<batch>/ (b<batch>-<precision> for tf32 and amp).
`--table` prints the committed reference results as the README's Markdown table (`--readme`
writes it between the README's reference-table markers): tbdkit.report.reference_table, run as its own
process (`python -m tbdkit.report.reference_table`), as the reference runs reach the agent.
It refuses on a machine without an NVIDIA GPU. It needs only the Python it runs under to have
PyTorch (and the kit's agent dependencies): no network, no stack setup.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tbdkit import launch
from tbdkit.analysis import ncu
from tbdkit.analysis.peak import Device, peak_flops
from tbdkit.analysis.timeline import merge_utilization
from tbdkit.bench.runner import Runner
from tbdkit.core.errors import UserError
from tbdkit.core.metric import metric, missing
from tbdkit.core.paths import KIT_ROOT
from tbdkit.env import nsight
from tbdkit.env.machine import gpu_count
from tbdkit.launch.base import EventHandler
from tbdkit.launch.native import NativeLauncher
from tbdkit.results import files as runfiles
from tbdkit.results import sink
from tbdkit.results import summary as summaries
from tbdkit.results.index import Index
from tbdkit.results.rundir import RunDir
from tbdkit.results.summary import MEASURED
from tbdkit.spec import catalog
from tbdkit.spec import run_spec as specs

PROG = "tbdkit reference"  # how its errors begin
MODELS = ("deepspeech2", "resnet50")  # the pair `make reference` runs by default (with an ncu pass)
# Sized so one model (two batch sizes, two processes each) fits a 10-minute call on an H100.
NCU_WARMUP_S = 15.0
NCU_TIMEOUT_S = 240.0
# iterations.csv and spec.json too: `tbdkit compare --reference` takes the reference's noise from its window's iterations.
COPIED = (
    runfiles.SUMMARY,
    runfiles.ENV,
    runfiles.MEMORY,
    runfiles.KERNELS,
    runfiles.KERNEL_LAUNCHES,
    runfiles.NCU_RAW,
    runfiles.ITERATIONS,
    runfiles.SPEC,
)
COVERAGE_AIM = 0.95
NCU_METHOD = (
    "Nsight Compute over {n} training iterations after warm-up in a separate process "
    "(cudaProfilerStart/Stop range, --clock-control none, --filter-mode per-launch-config "
    "--launch-count {count}: up to {count} launches of each kernel and launch configuration), "
    "weighted by the run's torch.profiler kernel timeline (kernel_launches.csv): sum over the "
    "iteration's kernels of calls x (2 x FFMA + FADD + FMUL thread instructions per launch) / "
    "(peak FP32 FLOP/s x their kernel time), paper eq. 2"
)
TENSOR_METHOD = (
    "Nsight Compute sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active of the "
    "sampled launches, weighted by each kernel's time in the run's kernel timeline"
)


AGENT_NEEDS = ("torch", "torchvision", "numpy", "psutil", "pydantic", "pynvml")
# Modules a model's PyTorch workload imports beyond the agent's (pyproject's pytorch extra installs them).
MODEL_NEEDS = {
    "a3c": ("gymnasium", "ale_py"),
    "bert": ("transformers",),
    "efficientdet": ("effdet",),
    "llama": ("transformers",),
    "dit": ("diffusers",),
}
PIP_NAMES = {"pynvml": "nvidia-ml-py", "ale_py": "ale-py"}


def needs(models: list[str]) -> tuple[str, ...]:
    """The modules the agent and these models' workloads import."""
    extra = [m for model in models for m in MODEL_NEEDS.get(model, ())]
    return AGENT_NEEDS + tuple(dict.fromkeys(extra))


def missing_modules(python: str, modules: tuple[str, ...] = AGENT_NEEDS) -> list[str]:
    """Those of `modules` that `python` lacks."""
    probe = (
        f"import importlib.util, sys; print(' '.join(m for m in {modules!r} if importlib.util.find_spec(m) is None))"
    )
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    return out.stdout.split() if out.returncode == 0 else list(modules)


def agent_python() -> str:
    """This Python when it has PyTorch (a GPU machine's system stack), else the kit's pytorch stack."""
    try:
        import torch  # noqa: F401

        return sys.executable
    except ImportError:
        from tbdkit.env import stacks

        return str(stacks.require("pytorch"))


def agent_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(KIT_ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def suite() -> list[str]:
    """Every model of the catalog that has a PyTorch file, in catalog order."""
    return [name for name, m in catalog.models().items() if "pytorch" in m.frameworks]


def check_models(models: list[str]) -> None:
    """Refuse, in one sentence, a model that has no PyTorch file (reference runs are PyTorch's)."""
    unknown = [m for m in models if m not in suite()]
    if unknown:
        raise UserError(f"No PyTorch model named {', '.join(map(repr, unknown))}: choose from {', '.join(suite())}.")


def two_batches(model: str) -> list[int]:
    """The paper preset's default batch size and the listed one below it (above it where none is below)."""
    hp = catalog.get(model).hp("paper")
    sizes = sorted(int(b) for b in hp["batch_sizes"])
    default = int(hp["default_batch"])
    below = [b for b in sizes if b < default]
    above = [b for b in sizes if b > default]
    return [below[-1], default] if below else [default, above[0]] if above else [default]


def destination(model: str, batch: int, precision: str) -> Path:
    """Where a reference run's files are committed."""
    name = f"b{batch}" if precision == "fp32" else f"b{batch}-{precision}"
    return KIT_ROOT / "workloads" / model / "reference" / name


def find_ncu() -> str | None:
    return nsight.find("ncu")


def launcher(cmd_prefix: list[str], env: dict[str, str], timeout_s: float) -> NativeLauncher:
    """The native launcher in this reference's Python, `cmd_prefix` (ncu) in front; past `timeout_s` its
    whole process group ends (ncu forks the agent) and the exit code is 124."""
    return NativeLauncher(prefix=tuple(cmd_prefix), python=agent_python(), env=env, timeout_s=timeout_s)


def shown(chosen: NativeLauncher, spec: specs.RunSpec) -> EventHandler:
    """The reference's events: the agent's command once its run folder exists; a Ctrl-C ends the whole
    reference (no clean stop under ncu)."""

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "run_dir":
            print("$ " + " ".join(chosen.command(spec, Path(event["run_dir"]))), flush=True)
        _stop_on_interrupt(event)

    return on_event


def run_agent(cmd_prefix: list[str], spec: specs.RunSpec, run_dir: Path, env: dict[str, str], timeout_s: float) -> int:
    """The agent in an existing run folder through the native launcher (tbdkit.launch.start), `cmd_prefix`
    (ncu) in front, past `timeout_s` its whole process group ended (exit code 124). A Ctrl-C ends the
    group too, and the reference with it."""
    chosen = launcher(cmd_prefix, env, timeout_s)
    print("$ " + " ".join(chosen.command(spec, run_dir)), flush=True)
    return launch.start(spec, run_dir, _stop_on_interrupt, chosen)


def _stop_on_interrupt(event: dict[str, Any]) -> None:
    if event.get("event") == "interrupt":  # Ctrl-C: no clean stop under ncu, the whole reference ends
        raise KeyboardInterrupt


def device_from_env(env_json: dict[str, Any]) -> Device | None:
    from tbdkit.agent.after_window import device_of

    return device_of(env_json, 0)[0]


def read_timeline(path: Path) -> list[ncu.TimelineEntry]:
    """kernel_launches.csv (tbdkit.analysis.timeline.LAUNCH_COLUMNS) as ncu.TimelineEntry rows."""
    import csv

    with path.open() as f:
        return [
            ncu.TimelineEntry(r["kernel"], r.get("launch") or "", int(r["calls"]), float(r["total_time_us"]) * 1e-6)
            for r in csv.DictReader(f)
        ]


def ncu_pass(
    spec: specs.RunSpec,
    run_dir: Path,
    iterations: int,
    launch_count: int,
    warmup_s: float = NCU_WARMUP_S,
    timeout_s: float = NCU_TIMEOUT_S,
) -> dict[str, dict[str, Any]]:
    """Profile a few iterations of the same spec under ncu (its warm-up capped at `warmup_s`, the whole
    pass at `timeout_s`), `launch_count` launches of each kernel and launch configuration; weight them by
    run_dir/kernel_launches.csv (the measured run's timeline); merge per-kernel FP32/tensor utilization
    into run_dir/kernels.csv and return the summary metrics. A run that ended `disturbed` is profiled too,
    and its metrics say so (its timeline, which weights the samples, was taken under that disturbance)."""
    method = NCU_METHOD.format(n=iterations, count=launch_count)

    def gap(reason: str) -> dict[str, dict[str, Any]]:
        return {
            "fp32_utilization": missing("%", method, reason),
            "tensor_utilization": missing("%", TENSOR_METHOD, reason),
        }

    exe = find_ncu()
    if exe is None:
        return gap("Nsight Compute (ncu) is not installed here")
    unreadable = _counters_unreadable()
    if unreadable:
        return gap(unreadable)
    rd = RunDir(run_dir)
    timeline_file = rd.kernel_launches
    if not timeline_file.is_file():
        return gap(
            "the run wrote no kernel timeline (kernel_launches.csv) to weight the ncu samples by: "
            "its kernel trace did not run or failed (see its summary's gpu_utilization_trace)"
        )
    device = device_from_env(rd.read_json(runfiles.ENV))
    peak = peak_flops(device, "fp32")[0] if device is not None else None
    if peak is None:
        return gap("no FP32 peak for this GPU (see the mfu metric's reason)")
    scratch = run_dir / "ncu"
    scratch.mkdir(exist_ok=True)
    report = scratch / "profile"
    metrics, dropped = ncu.choose_metrics(query_metrics(exe, spec.device))
    lacking = [m for m in ncu.REQUIRED if m in dropped]
    if lacking:
        return gap(f"FP32 utilization needs {', '.join(lacking)}: {dropped[lacking[0]]}")
    prefix = ncu.profile_args(exe, report, launch_count, metrics)
    measure = spec.measure.model_copy(update={"max_warmup_s": warmup_s, "max_warmup_stretch": 1.0})
    quick = spec.model_copy(update={"analyses": False, "measure": measure})
    rc = run_agent(
        prefix, quick, scratch, agent_env({"TBDKIT_PROFILE_ITERATIONS": str(iterations)}), timeout_s=timeout_s
    )
    rep = report.with_suffix(".ncu-rep")
    if rc != 0 or not rep.is_file():
        return gap(ncu.failure(rc, RunDir(scratch).log.read_text()))
    # demangled names with their parameter lists, as torch.profiler names the kernels of kernels.csv
    raw = subprocess.run(ncu.import_args(exe, rep), capture_output=True, text=True)
    rd.write_text(runfiles.NCU_RAW, raw.stdout)
    try:
        kernels = ncu.parse_raw_csv(raw.stdout)
        totals = ncu.whole_iteration(read_timeline(timeline_file), kernels, peak)
    except (ValueError, KeyError) as exc:
        return gap(f"ncu's CSV or the kernel timeline could not be read: {exc}")
    if totals["fp32_utilization"] is None:
        return gap(
            "no kernel of the run's timeline was among the ncu samples (kernel names or launch "
            "configurations did not match)"
        )
    _merge_kernels(rd, totals["per_kernel"])
    coverage = totals["coverage"]
    extra: dict[str, Any] = {
        "kernels_profiled": totals["kernels_profiled"],
        "coverage": round(coverage, 6),
        "active_s": round(totals["active_seconds"], 9),
        "peak_flops": peak,
    }
    notes = []
    if coverage < COVERAGE_AIM:
        notes.append(
            f"the ncu samples cover {100 * coverage:.1f}% of the iteration's kernel time (aim: "
            f"{100 * COVERAGE_AIM:.0f}%); the figure is over the covered kernels only"
        )
    disturbed = disturbed_note(run_dir)
    if disturbed:
        notes.append(disturbed)
    if notes:
        extra["note"] = "; ".join(notes)
    tensor = totals["tensor_utilization"] if ncu.TENSOR not in dropped else None
    if dropped:
        extra["metrics_dropped"] = "; ".join(f"{m}: {why}" for m, why in dropped.items())
    return {
        "fp32_utilization": metric(totals["fp32_utilization"], "%", method, **extra),
        "tensor_utilization": (
            metric(tensor, "%", TENSOR_METHOD, **extra)
            if tensor is not None
            else missing("%", TENSOR_METHOD, dropped.get(ncu.TENSOR, "ncu reported no tensor-pipe metric"))
        ),
    }


def query_metrics(exe: str, device: str) -> set[str] | None:
    """The metrics ncu lists for the run's GPU, or None when it gives no list (then every metric is asked for,
    as before ncu could be asked)."""
    index = int(device.split(":", 1)[1]) if device.startswith("cuda:") and device[5:].isdigit() else 0
    try:
        proc = subprocess.run(ncu.query_args(exe, index), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = ncu.parse_query_metrics(proc.stdout) if proc.returncode == 0 else set()
    return names or None


def _counters_unreadable() -> str | None:
    """Why the GPU's performance counters cannot be read here (doctor's check), or None."""
    try:
        from tbdkit.env.doctor import counters_check

        check = counters_check()
        if check.ok is False:
            return f"GPU performance counters are not readable (ERR_NVGPUCTRPERM): {check.detail}; fix: {check.fix}"
    except Exception:
        pass
    return None


def _merge_kernels(rd: RunDir, per_kernel: Any) -> None:
    """The per-kernel FP32/tensor utilization merged into the run's kernels.csv, where it has one."""
    table = rd.kernels
    if table.is_file():
        import csv

        rows = list(csv.DictReader(table.open()))
        merged = merge_utilization(
            rows, per_kernel, "FP32/tensor utilization from Nsight Compute samples weighted by the kernel timeline"
        )
        sink.write_csv(table, [{c: r.get(c, "") for c in runfiles.KERNEL_COLUMNS} for r in merged])


def disturbed_note(run_dir: Path) -> str | None:
    """What the ncu metrics say of a run that ended `disturbed`: the timeline that weights them was too."""
    try:
        summary = RunDir(run_dir).read_json(runfiles.SUMMARY)
    except (OSError, ValueError):
        return None
    if summary.get("status") != "disturbed":
        return None
    why = "; ".join(str(r) for r in summary.get("disturbed_reasons") or []) or "its summary says why"
    return f"the measured run ended disturbed ({why}): its kernel timeline, which weights the samples, was too"


def require_gpu() -> None:
    if gpu_count() == 0:
        raise UserError(
            "tbdkit reference measures on an NVIDIA GPU and NVML finds none here: run it on a GPU "
            "machine (on a CPU, `tbdkit bench --preset smoke` measures what a CPU can)."
        )


def profile_run(
    run_dir: Path, profile_iterations: int, launch_count: int, warmup_s: float, timeout_s: float
) -> dict[str, dict[str, Any]]:
    """The Nsight Compute pass over a run already measured (`tbdkit reference --run DIR`), in place: its
    summary.json gains fp32_utilization and tensor_utilization, its kernels.csv the per-kernel figures.
    Nothing is copied into workloads/."""
    require_gpu()
    rd = RunDir(run_dir)
    try:
        spec = specs.load(run_dir / runfiles.SPEC)
        summary = rd.read_json(runfiles.SUMMARY)
    except (OSError, ValueError, UserError) as exc:
        raise UserError(
            f"{run_dir} is not a finished run folder ({exc}): pass a folder `tbdkit bench` wrote."
        ) from None
    if summary.get("status") not in MEASURED:
        raise UserError(
            f"The run {run_dir} ended {summary.get('status')!r}, without numbers to weight an ncu pass by: "
            "profile a run that ended ok or disturbed."
        )
    if spec.framework != "pytorch" or not str(spec.device).startswith("cuda"):
        raise UserError(
            f"The run {run_dir} is {spec.framework} on {spec.device}: the ncu pass profiles PyTorch on a GPU."
        )
    extra = ncu_pass(spec, run_dir, profile_iterations, launch_count, warmup_s, timeout_s)
    summaries.record(run_dir, summary, metrics=extra)
    return extra


def reference(
    models: list[str],
    results: Path,
    precision: str,
    max_measure_s: float,
    max_warmup_s: float,
    profile_iterations: int,
    launch_count: int,
    use_ncu: bool,
    batches: list[int] | None = None,
    ncu_warmup_s: float = NCU_WARMUP_S,
    ncu_timeout_s: float = NCU_TIMEOUT_S,
) -> list[Path]:
    """`batches`: these batch sizes for every model, instead of each model's two (two_batches)."""
    require_gpu()
    python = agent_python()
    lacking = missing_modules(python, needs(models))
    if lacking:
        raise UserError(
            f"{python} lacks {', '.join(lacking)}, which the agent or these models need: install them "
            f"into it (pip install {' '.join(PIP_NAMES.get(m, m) for m in lacking)}), drop those models, "
            "or point TBDKIT_VENVS at a stack that has them."
        )
    copied = []
    chosen = launcher([], agent_env(), timeout_s=max_measure_s + max_warmup_s + 600)
    with Index(results) as index:
        runner = Runner(results, index, chosen)
        for model in models:
            for batch in batches or two_batches(model):
                spec = specs.build(
                    model=model,
                    framework="pytorch",
                    batch_size=batch,
                    precision=precision,
                    preset="paper",
                    device="cuda",
                    measure={"max_measure_s": max_measure_s, "max_warmup_s": max_warmup_s},
                )
                outcome = runner.run(spec, shown(chosen, spec), indexed=False)  # indexed with its ncu metrics
                run_dir, status, summary = outcome.run_dir, outcome.status, outcome.summary
                print(f"{model} b{batch}: {status} {summary.get('error') or ''}", flush=True)
                if status in MEASURED:
                    extra = (
                        ncu_pass(spec, run_dir, profile_iterations, launch_count, ncu_warmup_s, ncu_timeout_s)
                        if use_ncu
                        else {
                            k: missing("%", "Nsight Compute", "the ncu pass was skipped (--no-ncu)")
                            for k in ("fp32_utilization", "tensor_utilization")
                        }
                    )
                    summary = summaries.record(run_dir, summary, metrics=extra)
                runner.add(outcome)  # a reference run is listed by `tbdkit runs` as a bench run is
                dest = destination(model, batch, precision)
                dest.mkdir(parents=True, exist_ok=True)
                for name in COPIED:
                    if (run_dir / name).is_file():
                        shutil.copy2(run_dir / name, dest / name)
                copied.append(dest)
                print(f"  -> {dest}", flush=True)
    return copied


def table(readme: bool) -> None:
    """Print the committed reference results as Markdown; with readme, also write them into README.md.
    The table is the report's (tbdkit.report.reference_table), run as its own process."""
    cmd = [sys.executable, "-m", "tbdkit.report.reference_table", "--root", str(KIT_ROOT), *(["--readme"] * readme)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=agent_env())
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        said = proc.stderr.strip().splitlines()
        raise UserError(
            said[-1].removeprefix(f"{PROG}: ") if said else f"`{' '.join(cmd)}` failed (exit {proc.returncode})"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbdkit.bench.reference", description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", choices=suite(), help=f"repeatable; default: {', '.join(MODELS)}")
    parser.add_argument("--suite", action="store_true", help="every model of the suite (PyTorch)")
    parser.add_argument("--results", type=Path, default=Path("results/reference"))
    parser.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "amp"])
    parser.add_argument("--max-measure-s", type=float, default=30.0)
    parser.add_argument("--max-warmup-s", type=float, default=30.0)
    parser.add_argument("--profile-iterations", type=int, default=3)
    parser.add_argument(
        "--launch-count", type=int, default=3, help="launches ncu profiles of each kernel and launch configuration"
    )
    parser.add_argument("--no-ncu", action="store_true")
    parser.add_argument("--batch", type=int, action="append", help="repeatable; default: each model's two batch sizes")
    parser.add_argument("--ncu-warmup-s", type=float, default=NCU_WARMUP_S, help="cap on the ncu pass's warm-up")
    parser.add_argument("--ncu-timeout-s", type=float, default=NCU_TIMEOUT_S, help="the whole ncu pass, at most")
    parser.add_argument("--run", type=Path, help="profile this run folder in place (ncu only; nothing is copied)")
    parser.add_argument(
        "--table", action="store_true", help="print the committed reference results as a Markdown table; run nothing"
    )
    parser.add_argument("--readme", action="store_true", help="with --table: also write it into README.md")
    args = parser.parse_args(argv)
    try:
        if args.table:
            table(args.readme)
            return 0
        if args.run is not None:
            profile_run(args.run, args.profile_iterations, args.launch_count, args.ncu_warmup_s, args.ncu_timeout_s)
            return 0
        models = suite() if args.suite else args.model or list(MODELS)
        reference(
            models,
            args.results,
            args.precision,
            args.max_measure_s,
            args.max_warmup_s,
            args.profile_iterations,
            args.launch_count,
            not args.no_ncu,
            args.batch,
            args.ncu_warmup_s,
            args.ncu_timeout_s,
        )
    except UserError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
