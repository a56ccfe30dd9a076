"""MXNet 1.9 adapter: device, math mode, seeding, device synchronization and memory statistics.

Apache MXNet is archived; 1.9.1 is its last release. It has no TF32 switch of its own: `fp32`
sets NVIDIA_TF32_OVERRIDE=0 before the first GPU operation (cuBLAS and cuDNN then never use TF32),
`tf32` leaves the libraries' defaults. `amp` uses MXNet's float16 AMP with loss scaling and needs
a GPU. `bf16` is MXNet's bfloat16 AMP, which 1.9 has only on CPUs (oneDNN's bfloat16 operators, no
loss scaling): on a GPU it refuses, in one sentence.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import mxnet as mx
import numpy as np

from tbdkit.adapters.cuda_driver import identity, why_no_gpu
from tbdkit.adapters.mxnet_compile import StaticShapes
from tbdkit.adapters.replicas import split
from tbdkit.core.metric import metric

BF16_ON_GPU = (
    "precision 'bf16' on MXNet runs only on the CPU (MXNet 1.9's bfloat16 AMP has oneDNN's CPU operators "
    "and no GPU ones): run --precision amp (float16 with loss scaling) or fp32 on the GPU"
)


BF16_FAILED = (
    "MXNet 1.9's bfloat16 AMP could not run this model's step ({error}): its AMP casts operators' inputs "
    "one by one, and this network mixes float32 and bfloat16 where an operator needs one type, or builds a "
    "fused RNN's initial state (which has no input to cast); run --precision fp32 on MXNet"
)

BF16_NO_AVX512 = (
    "MXNet 1.9's bfloat16 AMP could not run this model's step ({error}): its oneDNN bfloat16 operators need a CPU "
    "with AVX-512, and this one has none (no avx512f in /proc/cpuinfo); run --precision fp32 on MXNet here, or bf16 "
    "on a CPU with AVX-512"
)


def cpu_has_avx512() -> bool:
    """Whether this CPU has AVX-512 (Linux's /proc/cpuinfo flags), which MXNet 1.9's oneDNN bfloat16 kernels need;
    True where the flags cannot be read (the failure's own message is then the one said)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True
    return " avx512f " in f" {flags} ".replace("\n", " ")


class Precision:
    def __init__(self, mode: str, on_gpu: bool) -> None:
        if mode == "amp" and not on_gpu:
            raise RuntimeError(
                "precision 'amp' on MXNet needs a GPU (MXNet 1.9's AMP is float16 with loss "
                "scaling): run with --precision fp32 on the CPU"
            )
        if mode == "bf16" and on_gpu:
            raise RuntimeError(BF16_ON_GPU)
        self.mode = mode
        if mode == "fp32":
            os.environ["NVIDIA_TF32_OVERRIDE"] = "0"
        else:
            os.environ.pop("NVIDIA_TF32_OVERRIDE", None)
        self.amp = mode == "amp"
        if self.amp or mode == "bf16":
            from mxnet.contrib import amp

            # process-wide and for good: AMP rewrites MXNet's operator namespaces with casts
            amp.init(target_dtype="float16" if self.amp else "bfloat16")

    def prepare_trainer(self, trainer: Any) -> None:
        if self.amp:
            from mxnet.contrib import amp

            amp.init_trainer(trainer)

    @contextlib.contextmanager
    def scale_loss(self, loss: Any, trainer: Any) -> Iterator[Any]:
        if not self.amp:
            yield loss
            return
        from mxnet.contrib import amp

        with amp.scale_loss(loss, trainer) as scaled:
            yield scaled

    def clip_global_norm(self, trainer: Any, params: Any, max_norm: float) -> None:
        """Clips the gradients of `params` (those that take one) to a global norm, after AMP's
        unscaling (so the norm is the true gradient's); then call trainer.step."""
        from mxnet import gluon

        if self.amp:
            from mxnet.contrib import amp

            amp.unscale(trainer)
        grads = [p.grad(ctx) for p in params if p.grad_req != "null" for ctx in p.list_ctx()]
        gluon.utils.clip_global_norm(grads, max_norm)

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "tf32": None if self.mode == "fp32" else "library default",
            "nvidia_tf32_override": os.environ.get("NVIDIA_TF32_OVERRIDE"),
            "amp_dtype": "float16" if self.amp else "bfloat16" if self.mode == "bf16" else None,
            "loss_scaling": self.amp,
        }


def gpu_probe() -> tuple[int, str | None]:
    """(GPUs MXNet sees, why none when 0): what `--preset auto` and `--device cuda` go by."""
    try:
        n = mx.context.num_gpus()
    except mx.base.MXNetError:  # a CUDA build without a usable driver raises here
        n = 0
    if n:
        return n, None
    # MXNet 1.9 reports only whether it was built with CUDA, not the version: the major it needs is unknown.
    return 0, why_no_gpu("MXNet", "unreported" if mx.runtime.Features().is_enabled("CUDA") else None)


def resolve_device(requested: str) -> tuple[mx.Context, int | None]:
    gpus, why = gpu_probe()
    if requested == "auto":
        requested = "cuda:0" if gpus else "cpu"
    if requested == "cpu":
        return mx.cpu(), None
    if not gpus:
        raise RuntimeError(f"--device {requested} cannot run: {why}")
    index = int(requested.partition(":")[2] or 0)
    if index >= gpus:
        raise RuntimeError(f"device '{requested}' was asked for but MXNet sees {gpus} GPU(s)")
    return mx.gpu(index), index


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    mx.random.seed(seed)


def threads_of(threads: tuple[int, int] | None) -> dict[str, Any]:
    """MXNet reads its threads once, when libmxnet loads: OMP_NUM_THREADS (operators) and
    MXNET_CPU_WORKER_NTHREADS (the CPU engine's workers), set by the launcher and the agent before
    the import (tbdkit.env.cpus.thread_env). What they were, and whether they match the budget."""
    intra, inter = os.environ.get("OMP_NUM_THREADS"), os.environ.get("MXNET_CPU_WORKER_NTHREADS")
    out: dict[str, Any] = {
        "requested": None if threads is None else {"intra_op": threads[0], "inter_op": threads[1]},
        "intra_op": int(intra) if intra and intra.isdigit() else None,
        "inter_op": int(inter) if inter and inter.isdigit() else None,
        "method": "OMP_NUM_THREADS and MXNET_CPU_WORKER_NTHREADS in the environment MXNet loaded with",
    }
    if threads is not None and (out["intra_op"], out["inter_op"]) != tuple(threads):
        out["error"] = "MXNet's environment does not hold the budget's threads: it was set after MXNet loaded"
    return out


NO_DIST_KVSTORE = (
    "this MXNet build has no distributed kvstore (mx.runtime.Features() lacks DIST_KVSTORE), "
    "so dist_sync cannot run: use a build with it, such as NGC's MXNet container"
)


def require_dist_kvstore(features: Any) -> None:
    """Refuse, in one sentence, a data-parallel job on an MXNet built without ps-lite."""
    if not features.is_enabled("DIST_KVSTORE"):
        raise RuntimeError(NO_DIST_KVSTORE)


def replica_contexts(replicas: int, on_gpu: bool) -> list[mx.Context]:
    """The contexts of one process's replicas (--one-process): its first `replicas` GPUs, or on the CPU
    `replicas` CPU contexts (MXNet keeps a copy of the parameters and gradients on each; their
    operators share the CPU engine's threads)."""
    if on_gpu:
        gpus = gpu_probe()[0]
        if gpus < replicas:
            raise RuntimeError(
                f"--gpus-per-node {replicas} --one-process needs {replicas} GPUs and MXNet sees {gpus}: "
                "ask for fewer, or make more visible (CUDA_VISIBLE_DEVICES)"
            )
        return [mx.gpu(i) for i in range(replicas)]
    return [mx.cpu(i) for i in range(replicas)]


def use_device_kvstore(trainers: list[Any]) -> None:
    """Every Gluon trainer sums its gradients over the replicas' contexts in the `device` kvstore (on
    a device, by GPU peer copies where it can: what the paper's MXNet ran for several GPUs of one
    machine), where MXNet's default also runs the optimizer (update_on_kvstore) and the weights are
    pulled back to each context. The shared step's loss is each part's mean and it steps by the
    number of parts (workloads/_shared/gluon_classifier.py): the update is the mean over replicas."""
    if not trainers:
        raise RuntimeError("the workload's training state holds no Gluon Trainer to give replicas")
    for trainer in trainers:
        if trainer._kv_initialized:  # Trainer makes its kvstore at its first step (MXNet 1.9.1)
            raise RuntimeError("a trainer stepped before its replicas were set up")
        trainer._kvstore_params["kvstore"] = "device"


class MXNetAdapter:
    framework = "mxnet"
    backend: str | None = None
    comm = None  # push and pull run in MXNet's asynchronous engine, overlapped with the backward pass
    comm_reason = (
        "the kvstore's push and pull run inside MXNet's asynchronous engine, overlapped with the backward "
        "pass; MXNet exposes no timing of them outside its profiler"
    )

    def __init__(
        self,
        workload: ModuleType,
        hp: dict[str, Any],
        device: str,
        precision: str,
        seed: int,
        threads: tuple[int, int] | None = None,
        replicas: int = 1,
        graph: str = "standard",
    ) -> None:
        self.threads = threads_of(threads)
        seed_everything(seed)
        self.ctx, self.cuda_index = resolve_device(device)
        self.device_label = "cpu" if self.cuda_index is None else f"cuda:{self.cuda_index}"
        self.precision = Precision(precision, self.cuda_index is not None)
        self.workload = workload
        # one process, several replicas (--one-process): a context each, the `device` kvstore between them
        self.contexts = replica_contexts(replicas, self.cuda_index is not None) if replicas > 1 else [self.ctx]
        self.training = workload.build(hp, self.contexts if replicas > 1 else self.ctx)
        self._stepped = False
        # --graph compiled: the hybridized blocks with static shapes too, where the inputs' shapes are fixed
        self.graph = graph
        self.static = StaticShapes(self.training, hp) if graph == "compiled" else None
        self.kvstore: Any = None  # a data-parallel job's dist_sync kvstore, once joined
        if replicas > 1:  # the Replicas capability: its devices, backend and comm_reason (a lone process has none)
            self.replica_devices: list[Any] = self.contexts
            use_device_kvstore(self._trainers())
            self.backend = f"kvstore device ({replicas} replicas in one process)"
        self.precision.prepare_trainer(self.training.trainer)

    def _trainers(self) -> list[Any]:
        """The Gluon trainers the workload's training state holds."""
        return [t for t in vars(self.training).values() if isinstance(t, mx.gluon.Trainer)]

    def join(self, world_size: int) -> None:
        """Join the parameter-server job the launcher set up (DMLC_* environment: scheduler, servers,
        workers): every Gluon trainer of the workload pushes its gradients to the servers, which sum them
        over the workers and run the optimizer (update_on_kvstore), and pulls the weights back. The
        gradient is rescaled by 1 / workers, so the update is the mean over workers as under DDP."""
        require_dist_kvstore(mx.runtime.Features())
        kv = mx.kv.create("dist_sync")  # blocks until every worker and server has met the scheduler
        if kv.num_workers != world_size:
            raise RuntimeError(
                f"the kvstore has {kv.num_workers} workers and the job {world_size}: "
                "DMLC_NUM_WORKER must be the job's world size"
            )
        trainers = self._trainers()
        if not trainers:
            raise RuntimeError("the workload's training state holds no Gluon Trainer to distribute")
        for trainer in trainers:  # Trainer's kvstore is made at its first step (MXNet 1.9.1, its last release)
            if trainer._kv_initialized:
                raise RuntimeError("a trainer stepped before the job was joined")
            trainer._kvstore_params["kvstore"] = kv
            trainer._scale /= world_size
        self.kvstore = kv
        self.backend = f"kvstore {kv.type} (parameter server, {world_size} workers)"

    def leave(self) -> None:
        """Nothing to end here: ps-lite finalizes (a barrier with the scheduler) as the process exits."""

    def prepare(self, batch: Any) -> Any:
        if len(self.contexts) == 1:
            return self.workload.to_device(batch, self.ctx)
        # one part of the batch per replica, each on its replica's context (the shared step takes the list)
        return [self.workload.to_device(part, c) for part, c in zip(split(batch, len(self.contexts)), self.contexts)]

    def step(self, inputs: Any) -> Any:
        try:
            loss = self.workload.train_step(self.training, inputs, self.precision)
            mx.nd.waitall()  # MXNet's engine is asynchronous: wait for the step to finish
        except (mx.base.MXNetError, TypeError) as exc:
            if self._stepped or self.precision.mode != "bf16" or self.is_oom(exc):
                raise
            last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:200]
            why = BF16_FAILED if cpu_has_avx512() else BF16_NO_AVX512
            raise RuntimeError(why.format(error=f"{type(exc).__name__}: {last}")) from exc
        self._stepped = True
        return loss

    def loss_value(self, loss: Any) -> float:
        return float(loss.asscalar())

    def compilations(self) -> int | None:
        return None  # MXNet 1.9 does not count its graph builds

    def compile_record(self) -> dict[str, Any]:
        if self.static is None:
            return {"graph": "standard", "compiler": "none: the workload's hybridize(static_alloc=True) (the paper's)"}
        return self.static.record()

    def _trainable(self) -> list[Any]:
        return [p for p in self.training.model.collect_params().values() if p.grad_req != "null"]

    def model_info(self) -> dict[str, Any]:
        params = self.training.model.collect_params().values()
        trainable = self._trainable()
        return {
            "parameters": sum(int(np.prod(p.shape)) for p in trainable),
            "trainable_parameters": sum(int(np.prod(p.shape)) for p in trainable),
            "non_trainable_state": sum(int(np.prod(p.shape)) for p in params if p.grad_req == "null"),
            "parameter_bytes": sum(int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize for p in trainable),
        }

    def optimizer_state_bytes(self) -> int | None:
        """Bytes of the Gluon trainers' optimizer states (momentum buffers, moments), which the trainer's
        updaters create at the first step; None if the workload's training state holds no trainer."""
        trainers = self._trainers()
        if not trainers:
            return None

        def nbytes(state: Any) -> int:
            if isinstance(state, mx.nd.NDArray):
                return int(state.size) * np.dtype(state.dtype).itemsize
            if isinstance(state, (list, tuple)):
                return sum(nbytes(s) for s in state)
            return 0  # None: the optimizer keeps no state for this parameter (SGD without momentum)

        # Trainer._updaters is private but fixed: MXNet 1.9.1 is the last release
        return sum(nbytes(state) for t in trainers for updater in t._updaters for state in updater.states.values())

    def memory_breakdown(self, step: Any) -> dict[str, Any]:
        """memory.json's categories over one step (tbdkit.adapters.mxnet_memory)."""
        from tbdkit.adapters.mxnet_memory import breakdown

        blocks = [v for v in vars(self.training).values() if isinstance(v, mx.gluon.Block)]
        return breakdown(self._trainable(), self.optimizer_state_bytes, self.ctx, step, blocks)

    def memory(self) -> dict[str, Any]:
        reason = (
            "MXNet 1.9 has no peak-allocation counter; NVML's memory used covers the GPU"
            if self.cuda_index is not None
            else "the run is on the CPU: MXNet's GPU memory pool is not in use (see peak_rss)"
        )
        return {
            "framework_peak_allocated": metric(None, "MiB", "MXNet storage manager", reason=reason),
            "framework_peak_reserved": metric(None, "MiB", "MXNet storage manager pool", reason=reason),
        }

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):
            return True
        text = str(exc)
        return isinstance(exc, mx.base.MXNetError) and (
            "out of memory" in text.lower() or "cudaMalloc" in text or "bad_alloc" in text
        )

    def environment(self) -> dict[str, Any]:
        features = mx.runtime.Features()
        env: dict[str, Any] = {
            "framework": "mxnet",
            "framework_version": mx.__version__,
            "cuda_build": features.is_enabled("CUDA"),
            # MXNet 1.9 reports only whether it was built with CUDA and cuDNN, not their versions.
            "cuda_runtime": None,
            "cudnn": None,
            "cudnn_build": features.is_enabled("CUDNN"),
            "versions_unreported": "MXNet 1.9 does not report its CUDA or cuDNN versions",
            "mkldnn": features.is_enabled("MKLDNN"),
            "cuda_available": mx.context.num_gpus() > 0,
            "device": self.device_label,
            "device_name": "cpu" if self.cuda_index is None else f"gpu({self.cuda_index})",
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "threads": self.threads,
            "math_mode": self.precision.describe(),
            "graph": self.graph,
            "compile": self.compile_record(),
            "kvstore": self.kvstore.type
            if self.kvstore is not None
            else ("device" if len(self.contexts) > 1 else None),
            "replica_contexts": [str(c) for c in self.contexts] if len(self.contexts) > 1 else None,
        }
        if self.cuda_index is not None:
            # MXNet exposes no UUID or PCI address: the driver API names the physical GPU of its CUDA ordinal.
            env["device_properties"] = identity(self.cuda_index)
        return env


def make(**kwargs: Any) -> MXNetAdapter:
    return MXNetAdapter(**kwargs)
