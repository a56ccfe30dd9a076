"""One run folder and its files: the one place that knows where a run file lives.

`RunDir(path)` names each file the kit writes there (tbdkit.results.files) and reads and writes them
through the atomic writers (tbdkit.results.sink) and the Summary reader (tbdkit.results.summary).
A data-parallel job's workers/rank<N>/ are RunDirs of their own (`rank(n)`); rank 0 is the job's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tbdkit.results import files, sink
from tbdkit.results import summary as summaries


class RunDir:
    __slots__ = ("path",)

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def name(self) -> str:
        """The run's id: its folder's name."""
        return self.path.name

    # --- the files, by role ------------------------------------------------------------------
    @property
    def spec(self) -> Path:
        return self.path / files.SPEC

    @property
    def env(self) -> Path:
        return self.path / files.ENV

    @property
    def iterations(self) -> Path:
        return self.path / files.ITERATIONS

    @property
    def samples(self) -> Path:
        return self.path / files.SAMPLES

    @property
    def summary(self) -> Path:
        return self.path / files.SUMMARY

    @property
    def memory(self) -> Path:
        return self.path / files.MEMORY

    @property
    def kernels(self) -> Path:
        return self.path / files.KERNELS

    @property
    def kernel_launches(self) -> Path:
        return self.path / files.KERNEL_LAUNCHES

    @property
    def log(self) -> Path:
        return self.path / files.LOG

    @property
    def convergence(self) -> Path:
        return self.path / files.CONVERGENCE

    @property
    def container_spec(self) -> Path:
        return self.path / files.CONTAINER_SPEC

    @property
    def container_state(self) -> Path:
        return self.path / files.CONTAINER_STATE

    @property
    def container_log(self) -> Path:
        return self.path / files.CONTAINER_LOG

    @property
    def ncu_raw(self) -> Path:
        return self.path / files.NCU_RAW

    @property
    def trace(self) -> Path:
        return self.path / files.TRACE

    @property
    def profiler_trace(self) -> Path:
        return self.path / files.PROFILER_TRACE

    @property
    def mllog(self) -> Path:
        return self.path / files.MLLOG

    # --- a data-parallel job's workers -------------------------------------------------------
    @property
    def workers(self) -> Path:
        return self.path / files.WORKERS

    def node_log(self, node: int) -> Path:
        """Node `node`'s own output (the netns launcher's nodes after the first)."""
        return self.workers / f"node{node}.log"

    def role_log(self, role: str) -> Path:
        """A TensorFlow or MXNet job's process `role` (rank<N>, server<N>, scheduler): its own output."""
        return self.workers / f"{role}.log"

    def rank(self, rank: int) -> RunDir:
        """Where worker `rank` writes: this folder for rank 0, workers/rank<N>/ for the others."""
        return self if rank == 0 else RunDir(self.workers / f"rank{rank}")

    def worker_logs(self) -> list[Path]:
        """Every log of the job: log.txt (listed whether or not it exists), the workers/*.log that exist
        (the nodes' own), and each workers/rank<N>/log.txt."""
        return sorted([self.log, *self.workers.glob("*.log"), *self.workers.glob(f"rank*/{files.LOG}")])

    # --- reading and writing -----------------------------------------------------------------
    def fallback(self, name: str) -> Path:
        """Where file `name` goes when this folder refuses it (a full disk): the system temp folder."""
        return sink.fallback_path(self.path, name)

    def write_json(self, name: str, data: Any) -> Path:
        path = self.path / name
        sink.write_json(path, data)
        return path

    def write_json_or_fallback(self, name: str, data: Any) -> Path:
        """Write file `name` here, or at its fallback path; returns where it landed (raises if both fail)."""
        return sink.write_json_or_fallback(self.path / name, data)

    def write_text(self, name: str, text: str) -> Path:
        path = self.path / name
        sink.write_text(path, text)
        return path

    def write_csv(self, name: str, rows: Iterable[dict[str, Any]], columns_when_empty: Sequence[str] = ()) -> Path:
        path = self.path / name
        sink.write_csv(path, rows, columns_when_empty)
        return path

    def read_json(self, name: str) -> Any:
        return sink.read_json(self.path / name)

    def read_summary(self) -> dict[str, Any]:
        """The checked summary (tbdkit.results.summary.read): FileNotFoundError if none, Unreadable if damaged."""
        return summaries.read(self.path)
