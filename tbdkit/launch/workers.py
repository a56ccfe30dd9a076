"""After a data-parallel job: if it failed, name the worker that failed first and where every
worker's log is, in the job's summary (rank 0 only sees that a peer went away)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tbdkit.launch.outcome import ended_by
from tbdkit.results import files as runfiles
from tbdkit.results import summary as summaries
from tbdkit.results.rundir import RunDir
from tbdkit.results.summary import MEASURED, Status
from tbdkit.spec.run_spec import RunSpec

# torchrun's failure report: "rank: 1 (local_rank: 1)\n  exitcode: 3 (pid: 123)" (the kit's launchers write it
# in the same words: tbdkit.launch.roles.worker_failed)
_REPORT = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def name_failed_workers(
    run_dir: Path, spec: RunSpec, exit_code: int, summary: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    if summary.get("failed_worker"):  # named already (a rendered job's own finishing step): said once
        return summary["status"], summary
    rd = RunDir(run_dir)
    missing, failed = [], []
    for rank in range(spec.world_size):
        worker = rd.rank(rank)
        own = worker.read_json(runfiles.SUMMARY) if worker.summary.is_file() else None
        if rank == 0 and own is not None and own.get("exit_code") is not None and not own.get("worker"):
            own = None  # the launcher's stand-in, not rank 0's own summary
        if own is None:
            missing.append(rank)
        elif own.get("status") not in (*MEASURED, "interrupted"):
            failed.append((rank, own.get("error")))
    if exit_code == 0 and not missing and not failed:
        return summary["status"], summary
    codes: dict[int, int] = {}
    for log in rd.worker_logs():
        if not log.is_file():  # a rendered job's node 0 writes no log.txt: its output is the scheduler's
            continue
        for rank, _, code in _REPORT.findall(log.read_text(errors="replace")):
            codes.setdefault(int(rank), int(code))
    node = {r: r // spec.gpus_per_node for r in range(spec.world_size)}
    if missing:
        # the one that exited, not those ended after it; one a signal killed before one that exited on its loss
        reported = [r for r in missing if r in codes]
        first = min(reported, key=lambda r: codes[r] >= 0) if reported else missing[0]
        if codes.get(first, 0) < 0:  # a signal (the OOM killer's SIGKILL, say), as torchrun's report gives it
            what = f"worker rank {first} (node {node[first]}) {ended_by(codes[first])} before writing its results"
        else:
            code = f"exit code {codes[first]}" if first in codes else "no exit code reported"
            what = f"worker rank {first} (node {node[first]}) died before writing its results ({code})"
    elif failed:
        first, error = failed[0]
        what = f"worker rank {first} (node {node[first]}) failed: {error}"
    else:
        what = f"the job's launcher {ended_by(exit_code)}"
    if summary.get("status") == "interrupted" and not missing and not failed:
        return summary["status"], summary
    logs = ", ".join(str(p.relative_to(run_dir)) for p in rd.worker_logs())
    who = first if missing else failed[0][0] if failed else None
    summary = summaries.record(
        run_dir,
        summary,
        status=Status.FAILED.value,
        error=f"{what}; every worker's log is kept: {logs}",
        failed_worker={
            "rank": who,
            "node": node[who] if who is not None else None,
            "peers_error": summary.get("error"),
        },
    )
    return Status.FAILED.value, summary
