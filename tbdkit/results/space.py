"""Before a run: the results folder can take it (a folder, writable, with room for the run folder).

A run that trains for minutes and then cannot write its summary loses its numbers; the launcher
checks here first and says, in one sentence, what to change.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from tbdkit.core.errors import UserError
from tbdkit.spec.run_spec import RunSpec

# Bytes per row, generous: an iterations.csv row is ~90 bytes, a samples.csv row (CPU, NVML and GPM
# readings) ~400; the rest (spec, env, summary, memory.json, kernels.csv, log.txt) is bounded by FIXED.
ITERATION_ROW = 256
SAMPLE_ROW = 1024
FIXED = 16 * 2**20


def run_folder_bytes(spec: RunSpec) -> int:
    """An upper estimate of one run folder's size: every iteration the caps allow, a sample row per
    sampling interval of the windows' time caps, and 16 MiB for the other files and the log."""
    m = spec.measure
    iterations = m.max_warmup_iterations + m.max_measure_iterations
    samples = int((m.longest_warmup_s + m.max_measure_s) / m.sample_interval_s) + 1
    return FIXED + iterations * ITERATION_ROW + samples * SAMPLE_ROW


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def check_results_folder(results: Path, spec: RunSpec) -> None:
    """UserError (one sentence with the fix) unless `results` is, or can be made, a writable folder
    with room for one more run folder."""
    results = Path(results)
    if results.exists() and not results.is_dir():
        raise UserError(f"The results path {results} is a file, not a folder: pass a folder with --results.")
    try:
        results.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=results, prefix=".tbdkit-write-check.")
        os.close(fd)
        os.unlink(probe)
    except NotADirectoryError:
        raise UserError(
            f"A part of the results path {results} is a file, not a folder: pass a folder with --results."
        ) from None
    except OSError as exc:
        why = "it is on read-only storage" if exc.errno == errno.EROFS else exc.strerror or str(exc)
        raise UserError(
            f"The results folder {results} cannot be written ({why}): pass a writable folder with --results."
        ) from None
    need, free = run_folder_bytes(spec), shutil.disk_usage(results).free
    if free < need:
        raise UserError(
            f"Only {_mib(free)} are free where the results go ({results}) and a run folder can "
            f"take up to {_mib(need)}: free some space or pass another --results."
        )
