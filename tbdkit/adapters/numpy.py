"""The NumPy adapter: the kit's machinery check, a small real training stack in the kit's own environment.

No framework: the workload's file (workloads/mlp_numpy/numpy.py) computes its forward and backward passes with
NumPy arrays and updates its parameters by SGD. The agent, the collectors, the launchers and the results run
around it exactly as around a framework, so they can be tested through real processes in about a second.

What it measures honestly: parameters (the arrays the workload's model holds), the peak of the memory traced by
tracemalloc (NumPy reports every array buffer it allocates to it) since the window's start, and, in a
data-parallel job, the seconds its workers spend exchanging gradients. What it has not: a GPU, a graph compiler,
float16 or bfloat16 arithmetic; each is refused in one sentence.

A data-parallel job's workers average their gradients over the agent's control channel
(tbdkit.agent.distributed.WithControl hands it over: the ChannelSync capability), each step, before the update:
the job trains as one model on the union of its workers' batches.
"""

from __future__ import annotations

import os
import random
import time
import tracemalloc
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from tbdkit.core.metric import metric

NO_GPU = "NumPy computes on the CPU only: the NumPy stack (the kit's machinery check) has no GPU"
NOT_COMPILED = "NumPy has no graph compiler: run --graph standard on the NumPy stack"
NO_HALF = (
    "precision '{mode}' on NumPy cannot run: the NumPy stack trains in float32 only (NumPy has no bfloat16 type "
    "and no mixed-precision training): run --precision fp32"
)
TRACED = (
    "tracemalloc's peak of traced memory since the window's start (NumPy reports each array buffer it allocates; "
    "Python's own objects are traced too)"
)


class Precision:
    """fp32 (and tf32, which is fp32 on a CPU); amp and bf16 are refused. `reduce` is the data-parallel hook the
    workload's step calls on its gradients before the update: the identity for one worker."""

    def __init__(self, mode: str, on_gpu: bool = False) -> None:
        if mode not in ("fp32", "tf32"):
            raise RuntimeError(NO_HALF.format(mode=mode))
        self.mode = mode
        self.reduce: Callable[[list[np.ndarray]], list[np.ndarray]] = lambda grads: grads

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "dtype": "float32",
            "tf32": None,
            "tf32_note": "TF32 is a GPU's math mode: NumPy's float32 on the CPU is fp32"
            if self.mode == "tf32"
            else None,
            "loss_scaling": False,
        }


def gpu_probe() -> tuple[int, str | None]:
    """(GPUs NumPy sees, why none): none, ever."""
    return 0, NO_GPU


def resolve_device(requested: str) -> None:
    if requested not in ("auto", "cpu"):
        raise RuntimeError(f"--device {requested} cannot run: {NO_GPU}; run --device cpu")


class CommClock:
    """Seconds the workers spend in their gradient exchange, on the host clock, since the window's start."""

    method = "host clock around each step's gradient exchange over the agent's control channel (through rank 0)"

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.seconds = 0.0

    def reset(self) -> None:
        self.seconds = 0.0

    def timed(self, exchange: Callable[[Any], list[Any]]) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        """The mean over the workers of each gradient, by `exchange` (the channel's gather), timed."""

        def mean(grads: list[np.ndarray]) -> list[np.ndarray]:
            start = self.clock()
            gathered = exchange(grads)
            out = [np.mean(np.stack(parts), axis=0) for parts in zip(*gathered)]
            self.seconds += self.clock() - start
            return out

        return mean


class NumpyAdapter:
    framework = "numpy"
    device_label = "cpu"
    cuda_index: int | None = None

    def __init__(
        self,
        workload: ModuleType,
        hp: dict[str, Any],
        device: str,
        precision: str,
        seed: int,
        threads: tuple[int, int] | None = None,
        graph: str = "standard",
    ) -> None:
        if graph != "standard":
            raise RuntimeError(NOT_COMPILED)
        resolve_device(device)
        self.precision = Precision(precision)
        self.threads = threads
        random.seed(seed)
        np.random.seed(seed % 2**32)
        if not tracemalloc.is_tracing():
            tracemalloc.start()
        # OpenBLAS maps its work buffer (32 MiB of address space) at its first matrix product and exits the
        # process when it cannot: one product now makes the buffer part of what the agent holds before a
        # --memory-limit-mb cap, so under the cap only the arrays of the batches and the step grow.
        _warm = np.ones((64, 64), np.float32)
        _warm @ _warm
        self.workload = workload
        self.training = workload.build(hp, "cpu")
        self.backend: str | None = None
        self.comm: CommClock | None = None
        self.comm_reason: str | None = "a single worker exchanges no gradients"
        self._exchange: Callable[[Any], list[Any]] | None = None

    # ParameterSync (with the ChannelSync capability): a worker of a data-parallel job
    def use_channel(self, exchange: Callable[[Any], list[Any]]) -> None:
        """The agent's control channel's gather (every worker's value, in rank order, on every worker)."""
        self._exchange = exchange

    def join(self, world_size: int) -> None:
        if self._exchange is None:
            raise RuntimeError("the NumPy stack's workers exchange gradients over the agent's control channel: none")
        self.comm = CommClock()
        self.comm_reason = None
        self.precision.reduce = self.comm.timed(self._exchange)
        self.backend = f"the agent's control channel (mean of {world_size} workers' gradients through rank 0)"

    def leave(self) -> None:
        """Nothing to end here: the control channel is the agent's."""

    def prepare(self, batch: Any) -> Any:
        return self.workload.to_device(batch, "cpu")

    def step(self, inputs: Any) -> Any:
        return self.workload.train_step(self.training, inputs, self.precision)

    def loss_value(self, loss: Any) -> float:
        return float(loss)

    def infer(self, inputs: Any) -> Any:
        return self.workload.forward(self.training, inputs)

    def reset_peaks(self) -> None:
        tracemalloc.reset_peak()
        if self.comm is not None:
            self.comm.reset()

    def model_info(self) -> dict[str, Any]:
        params = list(self.training.model.parameters())
        return {
            "parameters": sum(int(p.size) for p in params),
            "trainable_parameters": sum(int(p.size) for p in params),
            "non_trainable_state": 0,
            "parameter_bytes": sum(int(p.nbytes) for p in params),
        }

    def memory(self) -> dict[str, Any]:
        return {
            "framework_peak_allocated": metric(tracemalloc.get_traced_memory()[1] / 2**20, "MiB", TRACED),
            "framework_peak_reserved": metric(
                None, "MiB", "NumPy allocator pool", reason="NumPy keeps no pool: it allocates each array from malloc"
            ),
        }

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, MemoryError)

    def environment(self) -> dict[str, Any]:
        return {
            "framework": "numpy",
            "framework_version": np.__version__,
            "machinery_check": "the kit's own environment, no framework (tbdkit.adapters.numpy)",
            "cuda_build": False,
            "cuda_runtime": None,
            "cudnn": None,
            "cuda_available": False,
            "device": self.device_label,
            "device_name": "cpu",
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "threads": {
                "requested": None
                if self.threads is None
                else {"intra_op": self.threads[0], "inter_op": self.threads[1]},
                "method": "OMP_NUM_THREADS and OPENBLAS_NUM_THREADS in the environment NumPy's BLAS loaded with",
                "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
            },
            "math_mode": self.precision.describe(),
            "graph": "standard",
            "compile": {"graph": "standard", "compiler": "none: NumPy runs each operation as it comes"},
        }


def make(**kwargs: Any) -> NumpyAdapter:
    return NumpyAdapter(**kwargs)
