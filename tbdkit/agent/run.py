"""One run from spec to a complete run directory, whatever happens on the way.

Status in summary.json: ok | disturbed | oom | interrupted | failed. `disturbed` is a finished run whose
window saw foreign CPU load, another process on its GPU or throttling (tbdkit.agent.disturbance): its
numbers are kept beside the reasons. The run directory always ends with summary.json written last;
every file is written atomically.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import signal
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tbdkit.adapters import Capabilities, Distributed, capabilities
from tbdkit.adapters import load as load_adapter
from tbdkit.agent import after_window, compile_phase, converge, distributed, disturbance, events
from tbdkit.agent.collectors import Sampler, default_collectors, energy
from tbdkit.agent.collectors.gpu_state import GpuStateCollector
from tbdkit.agent.loop import (
    Prefetcher,
    StopRequested,
    TrainingLoop,
    synthetic_pool,
    throughput_metrics,
)
from tbdkit.analysis import trace
from tbdkit.env import cpus
from tbdkit.env import machine as envinfo
from tbdkit.results import files as runfiles
from tbdkit.results import oom, sink
from tbdkit.results import summary as summaries
from tbdkit.results.rundir import RunDir
from tbdkit.spec import catalog
from tbdkit.spec.run_spec import RunSpec

log = logging.getLogger("tbdkit.agent")


class StopFlag:
    """First SIGINT/SIGTERM: stop at the next iteration boundary. Second: stop now."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: Any) -> None:
        self.count += 1
        log.warning(
            "signal %s received: %s", signum, "stopping after this iteration" if self.count == 1 else "stopping now"
        )
        if self.count > 1:
            raise KeyboardInterrupt

    def requested(self) -> bool:
        return self.count > 0


def limit_memory(extra_mb: int) -> None:
    """Cap the address space at what the agent holds once the framework and model are loaded,
    plus `extra_mb`: batches, activations and optimizer state must fit in that."""
    import resource

    import psutil

    held = psutil.Process().memory_info().vms
    resource.setrlimit(resource.RLIMIT_AS, (held + extra_mb * 2**20, resource.getrlimit(resource.RLIMIT_AS)[1]))
    log.info("memory limit: %d MiB above the %d MiB of address space held after setup", extra_mb, held // 2**20)


def _classify(exc: BaseException, adapter: Any, memory_limited: bool = False) -> tuple[str, str]:
    if isinstance(exc, (StopRequested, KeyboardInterrupt)):
        return "interrupted", "the run was interrupted by the user (Ctrl-C / SIGTERM)"
    # Before the adapter exists (building a large model), the frameworks' OOM messages are recognised.
    oom_error = oom.of_error(exc, adapter is not None and adapter.is_oom(exc), memory_limited)
    if oom_error:
        return "oom", oom_error
    if catalog.is_data_error(exc):
        return "failed", str(exc)
    return "failed", f"{type(exc).__name__}: {exc}"


# A finished window is `unstable` (status stays ok: its numbers are real) when it is too short or too
# noisy to trust: a capped window of 2-4 iterations gives a 95% CI of +-100% or more.
UNSTABLE_MIN_ITERATIONS = 5
UNSTABLE_MAX_CI = 0.10
STABILITY_RULE = (
    f"unstable when the sample window has fewer than {UNSTABLE_MIN_ITERATIONS} iterations or the "
    f"throughput's 95% confidence half-width is undefined or above {UNSTABLE_MAX_CI:.0%} of it"
)


def instability(iterations: int, ci_relative: float) -> str | None:
    """Why a finished window is not to be trusted (STABILITY_RULE), or None."""
    reasons = []
    if iterations < UNSTABLE_MIN_ITERATIONS:
        reasons.append(f"the sample window has {iterations} iteration(s), fewer than {UNSTABLE_MIN_ITERATIONS}")
    if not math.isfinite(ci_relative):
        reasons.append("the throughput's 95% confidence interval is undefined")
    elif ci_relative > UNSTABLE_MAX_CI:
        reasons.append(f"the throughput's 95% confidence half-width is {ci_relative:.0%}, above {UNSTABLE_MAX_CI:.0%}")
    if not reasons:
        return None
    return "; ".join(reasons) + ": measure longer (--max-measure-s) or on a quieter machine"


PROFILE_ENV = "TBDKIT_PROFILE_ITERATIONS"


def profile_iterations() -> int:
    """Under an external profiler (ncu), TBDKIT_PROFILE_ITERATIONS=N replaces the sample window by
    N iterations inside the profiler's start/stop range, after warm-up."""
    import os

    value = os.environ.get(PROFILE_ENV, "").strip()
    return int(value) if value.isdigit() else 0


def _profiled_pass(
    adapter: Any, loop: TrainingLoop, n: int, summary: dict[str, Any], caps: Capabilities | None = None
) -> None:
    ranged = (caps if caps is not None else capabilities(adapter)).profiler_range
    if ranged is None:
        raise RuntimeError(f"{adapter.framework}: tbdkit has no profiler start/stop range for this framework")
    events.emit("phase", phase="profiled")
    with ranged.profiler_range():
        for _ in range(n):
            loop.one_more("profiled")
    summary["profiled_iterations"] = n
    summary["metrics"] = {}


def _as_worker(worker: distributed.Worker, run_dir: Path) -> Path:
    """A worker of a data-parallel job: rank 0 owns the run directory and the progress events;
    the others write under workers/rank<N>/ with a log of their own, and stay quiet on stdout."""
    own = worker.run_dir(run_dir)
    if worker.rank != 0:
        events.ENABLED = False
        handler = logging.FileHandler(RunDir(own).log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
    return own


@dataclass
class Run:
    """One run as its stages hand it on: what the spec and the catalog say, the summary built as it goes,
    and what each stage made ready (None until that stage ran, so a failure anywhere is still written)."""

    spec: RunSpec
    run_dir: Path
    worker: distributed.Worker | None
    stop: StopFlag
    started: dt.datetime
    model: catalog.Model
    hp: dict[str, Any]
    summary: dict[str, Any]
    adapter: Any = None
    caps: Capabilities | None = None
    dist: Distributed | None = None  # the adapter's data-parallel half, on a worker of a job
    data: Any = None  # the model's data module
    sampler: Sampler | None = None
    prefetcher: Prefetcher | None = None
    env: dict[str, Any] | None = None
    loop: TrainingLoop | None = None
    global_batch: int = 0
    data_seed: int = 0


@dataclass
class Measured:
    """The sample window `measure` took: its iterations and its throughput estimate."""

    window: list[Any]
    estimate: Any


def execute(spec: RunSpec, run_dir: Path) -> int:
    """One run, stage by stage: prepare, (converge, or) compile, warm up, measure, analyse; whatever
    happens, `write` finishes the run folder with summary.json last. Returns the agent's exit code."""
    run = begin(spec, run_dir)
    try:
        prepare(run)
        if spec.preset == "converge":
            train_to_target(run)
        else:
            compile_step(run)
            warm_up(run)
            measured = measure(run)
            if measured is not None:
                analyse(run, measured)
            finish(run)
    except BaseException as exc:  # the run directory must say what happened, whatever it was
        failed(run, exc)
    finally:
        write(run)
    return _exit_code(run.summary["status"])


def begin(spec: RunSpec, run_dir: Path) -> Run:
    """The run's own folder (a worker's under the job's), its stop flag and the summary it starts with."""
    worker = distributed.from_env()
    if worker is not None:
        run_dir = _as_worker(worker, run_dir)
    stop = StopFlag()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    started = dt.datetime.now(dt.timezone.utc)
    model = catalog.get(spec.model)
    summary = summaries.start(
        run_dir.name, spec, "failed", None, started_utc=started.isoformat(timespec="milliseconds")
    )
    return Run(spec, run_dir, worker, stop, started, model, model.hp(spec.preset, spec.variant), summary)


def prepare(run: Run) -> None:
    """CPU budget and pinning, the data, the adapter, the job, the collectors, the memory cap, env.json."""
    spec, worker, summary = run.spec, run.worker, run.summary
    events.emit("phase", phase="setup")
    # Threads and pinning before any framework loads: OpenMP and MXNet read their variables once.
    budget = cpus.plan(
        spec.cpus, spec.pin, 0 if spec.data == "synthetic" else 1, spec.workers_here if worker is not None else 1
    )
    os.environ.update(cpus.thread_env(budget))
    pinned = cpus.pin(budget)
    summary["cpu_budget"] = {
        "cpus": budget.cpus,
        "intra_op_threads": budget.intra_op,
        "inter_op_threads": budget.inter_op,
        "data_workers": budget.data_workers,
        "pinned": pinned,
    }
    run.data = catalog.load_module(run.model, "data")
    summary["data_source"] = run.data.check_source(spec.data, run.hp)
    _load_adapter(run, budget)
    _join_job(run)
    # Each worker trains its own batches (its seed offset by its rank), as a distributed sampler would;
    # one process with several replicas loads their batches as one, which its adapter splits.
    run.global_batch = spec.batch_size * spec.replicas_per_process
    run.data_seed = spec.seed + (worker.rank if worker else 0)
    # The threads the window needs exist before a memory cap (see Sampler): the collectors' sampling
    # thread, and a real dataset's reading thread (it opens the data, under the cap, at the first batch).
    if spec.preset != "converge":
        run.sampler = Sampler(default_collectors(run.adapter), spec.measure.sample_interval_s)
        if spec.data != "synthetic":
            data, hp, batch, seed = run.data, run.hp, run.global_batch, run.data_seed
            run.prefetcher = Prefetcher(lambda: data.batches(spec.data, hp, batch, seed))
    if spec.memory_limit_mb:  # the collectors, built above, have loaded their libraries (Zeus's among them)
        limit_memory(spec.memory_limit_mb)
    summary["device"] = run.adapter.device_label
    summary["model_info"] = run.adapter.model_info()
    run.env = envinfo.collect(run.adapter.environment(), spec.seed, runfiles.results_folder_of(run.run_dir))
    run.env["cpu_budget"] = {
        **budget.record(),
        "pinned_affinity": pinned,
        "thread_env": cpus.thread_env(budget),
        "method": "tbdkit.env.cpus.plan: os.sched_getaffinity, cgroup cpu.max; the framework's "
        "own read-back is framework.threads",
    }
    RunDir(run.run_dir).write_json(runfiles.ENV, run.env)


def _load_adapter(run: Run, budget: cpus.Budget) -> None:
    spec = run.spec
    run.adapter = load_adapter(
        spec.framework,
        workload=catalog.load_module(run.model, spec.framework),
        hp=run.hp,
        device=spec.device,
        precision=spec.precision,
        seed=spec.seed,
        threads=(budget.intra_op, budget.inter_op),
        # --graph compiled: the adapter compiles its train step (standard is each framework's default)
        **({"graph": spec.graph} if spec.graph != "standard" else {}),
        **({"compile_cache": spec.compile_cache} if spec.compile_cache != "private" else {}),
        **({"parallel": spec.parallel} if spec.parallel != "ddp" else {}),  # FSDP2 (PyTorch)
        # several replicas in this one process (--one-process): MirroredStrategy, MXNet's device kvstore
        **({"replicas": spec.replicas_per_process} if spec.replicas_per_process > 1 else {}),
    )
    run.caps = capabilities(run.adapter)
    if spec.graph != "standard" and run.caps.graph_compile is None:
        raise RuntimeError(f"{spec.framework}: this adapter has no compiled graphs (--graph {spec.graph})")


def _join_job(run: Run) -> None:
    """A worker of a job joins its process group; a job's or one process's replicas are recorded."""
    spec, worker, caps = run.spec, run.worker, run.caps
    assert caps is not None
    if worker is not None:
        if caps.distributed is not None:
            run.dist = caps.distributed
        elif caps.parameter_sync is not None:
            run.dist = distributed.WithControl(caps.parameter_sync, worker)
        else:
            raise RuntimeError(f"{spec.framework}: this adapter cannot run data-parallel jobs")
        run.dist.join(worker.world_size)
    if worker is not None or spec.replicas_per_process > 1:  # a job, or one process's replicas
        run.summary.update(
            world_size=worker.world_size if worker is not None else spec.world_size,
            nodes=spec.nodes,
            gpus_per_node=spec.gpus_per_node,
            link_rate=spec.link_rate,
            worker=worker.label if worker is not None else f"one process, {spec.replicas_per_process} replicas",
        )
        if spec.replicas_per_process > 1:
            run.summary["replicas_per_process"] = spec.replicas_per_process


def train_to_target(run: Run) -> None:
    """The converge preset: train until the quality target (tbdkit.agent.converge), no sample window."""
    spec = run.spec
    run.summary.update(
        converge.train(
            run.adapter,
            run.data,
            run.hp,
            spec.data,
            spec.batch_size,
            spec.seed,
            run.run_dir,
            run.stop.requested,
            run.model.throughput_unit,
        )
    )
    if run.stop.requested():  # the curve so far is kept; the run is marked interrupted as any other
        raise StopRequested
    run.summary["status"] = "ok"


def compile_step(run: Run) -> None:
    """The training loop over its batches; with --graph compiled, compilation apart, before warm-up
    (tbdkit.agent.compile_phase)."""
    spec = run.spec
    source = (
        run.prefetcher
        if run.prefetcher is not None
        else synthetic_pool(
            run.data.batches(spec.data, run.hp, run.global_batch, run.data_seed), spec.measure.synthetic_pool
        )
    )
    run.loop = TrainingLoop(
        run.adapter,
        source,
        spec.measure,
        run.stop.requested,
        agree=run.dist.agree if run.dist is not None else None,
        caps=run.caps,
        sampler=run.sampler,
    )
    # Each iteration's row reaches iterations.csv as it is measured: a SIGKILL keeps them.
    run.loop.result.iterations = sink.StreamedRows(RunDir(run.run_dir).iterations, lambda i: i.row())
    if spec.graph == "compiled":
        assert run.caps is not None
        pool = spec.measure.synthetic_pool if run.prefetcher is None else None
        phase = compile_phase.run(run.loop, run.caps.graph_compile, pool)
        run.summary["compile_phase"] = {**phase, "cache": compile_phase.CACHE[run.spec.compile_cache]}


def warm_up(run: Run) -> None:
    """Iterations until the cost per unit of work is stable (tbdkit.agent.loop)."""
    assert run.loop is not None
    run.loop.warm_up()


def measure(run: Run) -> Measured | None:
    """The sample window and its metrics (throughput, energy, disturbance, a job's); None after a
    profiled pass (TBDKIT_PROFILE_ITERATIONS), which measures no window."""
    spec, loop, summary, model = run.spec, run.loop, run.summary, run.model
    assert loop is not None
    profiled = profile_iterations()
    if profiled:
        _profiled_pass(run.adapter, loop, profiled, summary, run.caps)
        return None
    estimate = loop.measure()
    window = loop.result.iterations[loop.result.window["first_iteration"] : loop.result.window["last_iteration"] + 1]
    reason = instability(len(window), estimate.relative)  # rank 0's own window on a data-parallel job
    summary.update(unstable=reason is not None, instability_reason=reason, stability_rule=STABILITY_RULE)
    summary["metrics"] = {
        **throughput_metrics(
            window, estimate, model.throughput_unit, model.sample_unit, model.info.get("extra_units", {})
        ),
        "compile_s": compile_phase.compile_seconds(
            summary.get("compile_phase"), estimate.throughput, model.throughput_unit
        ),
        **loop.result.metrics,
        **run.adapter.memory(),
    }
    summary["metrics"].update(
        energy.per_work(
            summary["metrics"],
            sum(i.work for i in window),
            sum(i.samples for i in window),
            model.throughput_unit,
            model.sample_unit,
            run.adapter.cuda_index is not None,
        )
    )
    limit = spec.measure.foreign_cpu_limit
    summary.update(
        disturbed_reasons=disturbance.reasons(loop.result.metrics, limit),
        disturbance_rule=disturbance.rule(limit),
        gpu_state=_gpu_state(loop),
    )
    measured = Measured(window, estimate)
    if run.worker is not None and run.dist is not None:
        _job_metrics(run, measured)
    elif spec.replicas_per_process > 1:
        _replica_metrics(run, measured)
    return measured


def _job_metrics(run: Run, measured: Measured) -> None:
    """A worker's window gathered with its peers': the job's throughput is what all workers train together;
    rank 0's own estimate stays beside it."""
    dist, worker, metrics = run.dist, run.worker, run.summary["metrics"]
    assert dist is not None and worker is not None
    window_s = sum(i.seconds for i in measured.window)
    comm = dist.comm.seconds / window_s * 100 if dist.comm is not None and window_s else None
    gathered = dist.gather((measured.estimate.throughput, comm))
    metrics.update(
        distributed.job_metrics(
            [g[0] for g in gathered],
            run.model.throughput_unit,
            [g[1] for g in gathered],
            window_s,
            getattr(dist.comm, "method", None),
            getattr(dist, "comm_reason", None),
            getattr(dist, "comm_method", None),
            getattr(dist, "overlaps_backward", True),
        )
    )
    shards = getattr(run.adapter, "shard_memory", lambda: None)()
    if shards is not None:  # FSDP2: every rank's shards, in rank order (a collective: every rank has them or none)
        method = shards.pop("method")
        run.summary["shard_memory"] = {"unit": "bytes", "method": method, "ranks": dist.gather(shards)}
    metrics["worker0_throughput"] = metrics["throughput"]
    metrics["throughput"] = {**metrics["aggregate_throughput"], "ci95_half_width": None, "ci95_relative": None}
    run.summary["interconnect"] = interconnect(
        run.adapter, distributed.interface_towards(worker.master_addr), run.spec.link_rate, dist.backend
    )


def _replica_metrics(run: Run, measured: Measured) -> None:
    """One process's replicas (--one-process): their throughput and how they exchange gradients."""
    replicas = run.caps.replicas if run.caps is not None else None
    run.summary["metrics"].update(
        distributed.replica_metrics(
            measured.estimate.throughput,
            run.spec.replicas_per_process,
            run.model.throughput_unit,
            replicas.comm_reason if replicas is not None else None,
        )
    )
    run.summary["interconnect"] = interconnect(
        run.adapter,
        {"interface": None, "reason": "one process: its replicas exchange gradients in memory, not over a network"},
        None,
        replicas.backend if replicas is not None else None,
    )


def analyse(run: Run, measured: Measured) -> None:
    """The analyses after the window (kernels, memory, ncu; tbdkit.agent.after_window), of a
    single-process run that asked for them."""
    spec = run.spec
    if spec.analyses and run.worker is None and spec.replicas_per_process == 1:
        assert run.loop is not None and run.env is not None
        events.emit("phase", phase="analysis")
        run.summary["metrics"].update(
            after_window.run(
                run.adapter,
                run.loop,
                run.env,
                run.run_dir,
                run.summary["metrics"]["throughput"],
                spec.precision,
                run.caps,
            )
        )


def finish(run: Run) -> None:
    """A run that got through: its losses and its status (disturbed when something competed)."""
    assert run.loop is not None
    losses = [i.loss for i in run.loop.result.iterations if i.loss is not None]
    run.summary["loss"] = {"first": losses[0] if losses else None, "last": losses[-1] if losses else None}
    run.summary["status"] = "disturbed" if run.summary.get("disturbed_reasons") else "ok"


def failed(run: Run, exc: BaseException) -> None:
    """What went wrong, classified (oom, interrupted, failed) into the summary; what was measured kept."""
    summary = run.summary
    status, message = _classify(exc, run.adapter, bool(run.spec.memory_limit_mb))
    summary["status"], summary["error"] = status, message
    if status == "failed" and not catalog.is_data_error(exc):
        log.error("run failed:\n%s", traceback.format_exc())
    else:
        log.error("run %s: %s", status, message)
    if status == "oom":
        summary["error"] = (
            f"out of memory at batch size {run.spec.batch_size}: try a smaller batch "
            f"{summary['error'].removeprefix('out of memory ')}"
        )
    if run.loop is not None and run.loop.result.metrics:
        summary["metrics"] = run.loop.result.metrics


def write(run: Run) -> None:
    """Leave the job, then the run folder's files: iterations, samples, the trace, and summary.json last."""
    summary, loop = run.summary, run.loop
    if run.dist is not None:
        try:
            run.dist.leave()
        except Exception:  # a broken process group must not keep the run directory from being finished
            log.warning("leaving the process group failed:\n%s", traceback.format_exc())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if loop is not None:
        # the wall-clock time of iterations.csv's start_s = 0 (mllog.txt's run_start and blocks stand on it)
        loop_start = time.time() - (loop.clock() - loop.t0)
        summary["loop_started_utc"] = dt.datetime.fromtimestamp(loop_start, dt.timezone.utc).isoformat(
            timespec="milliseconds"
        )
        summary["warmup"] = loop.result.warmup or None
        summary["window"] = loop.result.window or None
        if isinstance(loop.result.iterations, sink.StreamedRows):
            loop.result.iterations.close()
        _write_rows(
            run.run_dir,
            runfiles.ITERATIONS,
            [i.row() for i in loop.result.iterations],
            summary,
            runfiles.ITERATION_COLUMNS,
        )
        _write_rows(run.run_dir, runfiles.SAMPLES, loop.result.samples, summary)
        _write_trace(run.run_dir, summary)
    if run.env is not None:
        summary["math_mode"] = run.env["framework"].get("math_mode")
    if run.caps is not None and run.caps.graph_compile is not None:
        summary["compile"] = _compile_record(run.caps.graph_compile, summary)
    summary["finished_utc"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
    summary["wall_s"] = round((dt.datetime.now(dt.timezone.utc) - run.started).total_seconds(), 3)
    _write_summary(run.run_dir, summary)
    events.emit("done", status=summary["status"], error=summary["error"])


def _compile_record(graph: Any, summary: dict[str, Any]) -> dict[str, Any]:
    """summary.json's `compile`: how the step ran (standard or compiled) and what the compiler did,
    with the compilations after the compile phase (in warm-up and the window: each a sign that the
    phase did not see every shape)."""
    try:
        record = graph.compile_record()
    except Exception as exc:  # the record is a report, never a reason to lose the run
        return {"graph": getattr(graph, "graph", None), "error": f"{type(exc).__name__}: {exc}"}
    phase = summary.get("compile_phase") or {}
    total = graph.compilations()
    if phase and total is not None and phase.get("compilations") is not None:
        record["compilations_after_compile_phase"] = total - phase["compilations"]
    return record


def interconnect(adapter: Any, network: dict[str, Any], link_rate: str | None, backend: str | None) -> dict[str, Any]:
    """summary.json's interconnect of a job or of one process's replicas: the GPUs' link, the network,
    its shaped rate and the framework's backend."""
    return {
        "gpu_link": None,
        "gpu_link_reason": (
            "NVLink/PCIe topology is read only on GPUs"
            if adapter.cuda_index is None
            else "not read by this kit version"
        ),
        "network": network,
        "link_rate": link_rate,
        "backend": backend,
    }


def _gpu_state(loop: TrainingLoop) -> dict[str, Any]:
    """The GPU's state at the window's start and end (collectors.gpu_state), or why there is none."""
    for c in loop.collectors:
        if isinstance(c, GpuStateCollector):
            return c.states or {"reason": c.reason or "NVML gave no state"}
    return {"reason": "no GPU state collector ran"}


def _write_rows(
    run_dir: Path, name: str, rows: list[dict[str, Any]], summary: dict[str, Any], columns: Sequence[str] = ()
) -> None:
    """A CSV of the run (`columns` its header where it has no rows); if the disk refuses it the summary says so
    and the run still ends whole."""
    try:
        RunDir(run_dir).write_csv(name, rows, columns)
    except OSError as exc:
        summary.setdefault("files_not_written", {})[name] = f"{exc.strerror or exc} ({len(rows)} rows lost)"
        log.error(
            "%s could not be written (%s): its %d rows are lost; the summary is written next",
            name,
            exc.strerror or exc,
            len(rows),
        )


def _write_trace(run_dir: Path, summary: dict[str, Any]) -> None:
    """trace.json from the files just written (after the window: it costs the measurement nothing);
    a trace that cannot be made is named in the summary, never a reason to lose the run."""
    try:
        trace.write(run_dir, summary)
    except Exception as exc:
        summary.setdefault("files_not_written", {})[runfiles.TRACE] = f"{type(exc).__name__}: {exc}"
        log.error("%s could not be written: %s", runfiles.TRACE, exc)


def _write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """summary.json in the run folder, or, if the disk refuses it, in the system temp folder (the
    launcher finds it there and says where)."""
    rd = RunDir(run_dir)
    try:
        where = summaries.write(run_dir, summary)
    except OSError as exc:
        log.error(
            "summary.json could not be written in the run folder nor in %s (%s)",
            rd.fallback(runfiles.SUMMARY).parent,
            exc.strerror or exc,
        )
        return
    if where != rd.summary:
        log.error("summary.json could not be written in the run folder (full disk?): it is kept at %s", where)


def _exit_code(status: str) -> int:
    return summaries.exit_code(status)
