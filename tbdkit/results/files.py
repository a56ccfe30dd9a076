"""The files the kit writes into a run folder, by name, in one place: what a bundle packs and
what a reader may expect. Anything else found in a run folder was put there by someone else.

A run folder (results/<run-id>/, or results/sweeps/<sweep-id>/probes/<run-id>/ for the max-batch
search's probes) holds the RUN_FILES at its top; a data-parallel job adds workers/node<N>.log
(the netns launcher's node N) and workers/rank<N>/ holding rank N's own RUN_FILES.
"""

from __future__ import annotations

import re
from pathlib import PurePath, PurePosixPath
from typing import TypeVar

from tbdkit.core import paths

P = TypeVar("P", bound=PurePath)

SPEC = "spec.json"  # the RunSpec (launchers)
ENV = "env.json"  # machine, framework and kit versions (agent)
ITERATIONS = "iterations.csv"  # one row per iteration (agent)
SAMPLES = "samples.csv"  # the collectors' samples over the window (agent)
SUMMARY = "summary.json"  # status and metrics, written last (agent, or the launcher if the agent died)
MEMORY = "memory.json"  # the memory breakdown (measured after the agent's window)
KERNELS = "kernels.csv"  # the kernel table (measured after the agent's window)
KERNEL_LAUNCHES = "kernel_launches.csv"  # calls and time per kernel and launch configuration (measured after the agent's window, CUDA)
LOG = "log.txt"  # the command, then the agent's stderr (launchers)
CONVERGENCE = "convergence.csv"  # the converge preset's quality curve (agent)
CONTAINER_SPEC = "container-spec.json"  # what the docker launcher asked the container for
CONTAINER_STATE = "container.json"  # the container's end state (docker launcher)
CONTAINER_LOG = "container.log"  # the container's own output (docker launcher)
NCU_RAW = "ncu_raw.csv"  # Nsight Compute's raw export (reference runs)
TRACE = "trace.json"  # the run's timeline in Chrome trace-event format (agent, after the run)
PROFILER_TRACE = "profiler_trace.json"  # torch.profiler's Chrome trace of the kernel timeline, with its clock anchor (measured after the agent's window, CUDA)
MLLOG = "mllog.txt"  # MLPerf-style :::MLLOG lines (launcher, after the run)

RUN_FILES: frozenset[str] = frozenset(
    {
        SPEC,
        ENV,
        ITERATIONS,
        SAMPLES,
        SUMMARY,
        MEMORY,
        KERNELS,
        KERNEL_LAUNCHES,
        LOG,
        CONVERGENCE,
        CONTAINER_SPEC,
        CONTAINER_STATE,
        CONTAINER_LOG,
        NCU_RAW,
        TRACE,
        PROFILER_TRACE,
        MLLOG,
    }
)
# A run's timelines, which can be large: a bundle carries one above a size as <name>.gz (tbdkit.artifact).
TRACES: frozenset[str] = frozenset({TRACE, PROFILER_TRACE})
COMPRESSED_TRACES: frozenset[str] = frozenset(f"{name}.gz" for name in TRACES)
# kernels.csv's columns: the kernel table (tbdkit.analysis.timeline, the reference's ncu pass)
KERNEL_COLUMNS = (
    "kernel",
    "calls",
    "total_time_us",
    "time_share",
    "mean_time_us",
    "fp32_utilization",
    "tensor_utilization",
    "method",
)
# The columns of every row of iterations.csv (tbdkit.agent.loop.Iteration.row; a batch's own counts, work_*, come
# between work and loss): its header even where a run stopped before its first iteration.
ITERATION_COLUMNS = ("iteration", "phase", "start_s", "seconds", "data_wait_s", "samples", "work", "loss")
WORKERS = "workers"
_NODE_LOG = re.compile(r"(node|rank|server)[0-9]+\.log|scheduler\.log")  # netns nodes; TF/MXNet roles
_RANK_DIR = re.compile(r"rank[0-9]+")

SWEEPS = paths.SWEEPS  # results/sweeps/<sweep-id>/ (named in core: a SweepSpec names its own folder)
SWEEP_STATE = "sweep.json"
PROBES = "probes"  # results/sweeps/<sweep-id>/probes/<run-id>/: run folders


def is_run_file(relative: PurePosixPath) -> bool:
    """Whether `relative` (a path inside a run folder) names a file the kit writes there."""
    parts = relative.parts
    if len(parts) == 1:
        return parts[0] in RUN_FILES or parts[0] in COMPRESSED_TRACES
    if parts[0] != WORKERS:
        return False
    if len(parts) == 2:
        return bool(_NODE_LOG.fullmatch(parts[1]))
    return (
        len(parts) == 3
        and bool(_RANK_DIR.fullmatch(parts[1]))
        and (parts[2] in RUN_FILES or parts[2] in COMPRESSED_TRACES)
    )


def is_worker_dir(relative: PurePosixPath) -> bool:
    """Whether `relative` (inside a run folder) is workers/ or one of its workers/rank<N>/."""
    parts = relative.parts
    return parts == (WORKERS,) or (len(parts) == 2 and parts[0] == WORKERS and bool(_RANK_DIR.fullmatch(parts[1])))


def results_folder_of(run_dir: P) -> P:
    """The results folder a run folder belongs to, by the layout alone (never by looking upward for
    a file): results/<run-id>/, results/sweeps/<sweep-id>/probes/<run-id>/, and a worker's
    <run folder>/workers/rank<N>/."""
    run = run_dir
    if _RANK_DIR.fullmatch(run.name) and run.parent.name == WORKERS:
        run = run.parent.parent
    if run.parent.name == PROBES and run.parent.parent.parent.name == SWEEPS:
        return run.parent.parent.parent.parent
    return run.parent
