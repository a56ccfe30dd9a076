"""PyTorch adapter: device, math mode, seeding, device synchronization and memory statistics."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import random
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import torch

from tbdkit.adapters.cuda_driver import why_no_gpu
from tbdkit.adapters.pytorch_compile import BACKEND, CompiledStep
from tbdkit.analysis.peak import bf16_refusal, fp8_refusal
from tbdkit.core.metric import metric


class Precision:
    """The math mode of a run: fp32 (TF32 off), tf32 (TF32 matmul and convolutions), amp (float16
    autocast and loss scaling on a GPU, bfloat16 autocast on a CPU), bf16 (bfloat16 autocast without
    loss scaling, on a GPU of compute capability 8.0 or newer, or on a CPU), fp8 (bf16's autocast with the
    model's linear layers in torchao's float8 training: tbdkit.adapters.pytorch_float8; compute capability 8.9
    or newer, or a CPU, whose float8 matmul tests the path but measures nothing)."""

    def __init__(self, mode: str, device: torch.device) -> None:
        refusals = {"bf16": bf16_refusal, "fp8": fp8_refusal}
        if mode in refusals and device.type == "cuda":
            props = torch.cuda.get_device_properties(device)
            refusal = refusals[mode](props.name, (props.major, props.minor))
            if refusal:
                raise RuntimeError(refusal)
        self.mode = mode
        self.device = device
        allow_tf32 = mode == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        torch.backends.cudnn.allow_tf32 = allow_tf32
        torch.set_float32_matmul_precision("high" if allow_tf32 else "highest")
        amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
        self.amp_dtype = amp_dtype if mode == "amp" else torch.bfloat16 if mode in ("bf16", "fp8") else None
        self.scaler = torch.amp.GradScaler(device.type, enabled=(mode == "amp" and device.type == "cuda"))

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "tf32_cudnn": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "autocast_dtype": str(self.amp_dtype).removeprefix("torch.") if self.amp_dtype else None,
            "grad_scaler": self.scaler.is_enabled(),
        }


def gpu_probe() -> tuple[int, str | None]:
    """(GPUs PyTorch sees, why none when 0): what `--preset auto` and `--device cuda` go by."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return n, None if n else why_no_gpu("PyTorch", torch.version.cuda)


def resolve_device(requested: str) -> torch.device:
    """The run's device. A worker of a torchrun job uses the GPU of its local rank, counted among the
    GPUs CUDA_VISIBLE_DEVICES leaves it (the netns launcher gives each node its own)."""
    local = int(os.environ.get("LOCAL_RANK", "0")) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else 0
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(requested)
    if device.type != "cuda":
        return device
    count, why = gpu_probe()
    if not count:
        raise RuntimeError(f"--device {requested} cannot run: {why}")
    if device.index is None:
        device = torch.device(f"cuda:{local}")
    if device.index >= count:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise RuntimeError(
            f"device {device} was asked for but PyTorch sees {count} GPU(s)"
            + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else "")
            + ": give each worker its own GPU, or fewer workers per node"
        )
    return device


def pci_bus_id(props: Any) -> str | None:
    """NVML's form of the device's PCI address, domain:bus:device.function, from CUDA's properties."""
    if not hasattr(props, "pci_bus_id"):
        return None
    return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"


SHAPES = {"fixed": True, "bucketed": True, "variable": False}


def cudnn_benchmark(hp: dict[str, Any]) -> tuple[bool, str]:
    """Whether cuDNN autotunes (torch.backends.cudnn.benchmark), from the workload's declared input
    shapes (workload.toml `input_shapes`): fixed shapes tune once in warm-up; variable shapes would
    re-tune inside the sample window, so autotuning stays off; bucketed shapes tune once per bucket,
    which warm-up must see."""
    shapes = hp.get("input_shapes")
    if shapes not in SHAPES:
        return False, f"input_shapes is {shapes!r}, not one of {sorted(SHAPES)}: autotuning off"
    on = SHAPES[shapes]
    return on, f"input_shapes = {shapes!r} in workload.toml: autotuning {'on' if on else 'off'}"


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals: overlapping buckets count once."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


class CommTimer:
    """A DDP communication hook: the default all-reduce, each bucket's interval from launch to
    completion recorded. Buckets overlap each other and the backward pass, so the time in
    communication is the union of those intervals, not their sum.

    gloo (CPU) completes the future when the all-reduce has finished: host clock times it. NCCL
    completes it as soon as the all-reduce is queued on its communication stream, so host clock would
    read ~0: there each bucket is timed on the GPU with CUDA events instead, the start recorded on
    the current stream as the hook launches the all-reduce (NCCL's stream waits on it), the end
    recorded inside the future's callback, whose current stream PyTorch synchronizes with the NCCL
    stream (torch.futures.Future.then), so it completes when the all-reduce has. Event times are
    read against an origin event recorded when the window starts (reset)."""

    KEEP = 512  # resolved event pairs become plain intervals beyond this many, so events are recycled

    def __init__(self, cuda: bool = False, event: Callable[[], Any] | None = None) -> None:
        self.cuda = cuda
        self._event = event or (lambda: torch.cuda.Event(enable_timing=True))
        self.intervals: list[tuple[float, float]] = []
        self.pending: list[tuple[Any, Any]] = []
        self._origin: Any = None

    @property
    def method(self) -> str:
        return (
            "CUDA events around each bucket's NCCL all-reduce (start on the launching stream, end on the "
            "stream synchronized with NCCL's), union of the intervals"
            if self.cuda
            else "host clock from each bucket's all-reduce launch to its future's completion (gloo), union of the intervals"
        )

    def _resolve(self, wait: bool) -> None:
        keep = []
        for start, end in self.pending:
            if wait:
                end.synchronize()
            elif not end.query():
                keep.append((start, end))
                continue
            self.intervals.append((self._origin.elapsed_time(start) / 1e3, self._origin.elapsed_time(end) / 1e3))
        self.pending = keep

    @property
    def seconds(self) -> float:
        if self.cuda:
            self._resolve(wait=True)
        return union_seconds(self.intervals)

    def reset(self) -> None:
        self.intervals, self.pending = [], []
        if self.cuda:
            self._origin = self._event()
            self._origin.record()

    def hook(self) -> Callable[..., Any]:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def timed_allreduce(state, bucket):  # noqa: ANN001  (DDP rejects hooks annotated other than it expects)
            if not self.cuda:
                t0 = time.perf_counter()

                def done(fut):  # noqa: ANN001
                    self.intervals.append((t0, time.perf_counter()))
                    return fut.value()

                return default_hooks.allreduce_hook(state, bucket).then(done)
            if self._origin is None:
                self.reset()
            start = self._event()
            start.record()

            def finished(fut):  # noqa: ANN001  (runs with a stream synchronized with the NCCL stream as current)
                end = self._event()
                end.record()
                self.pending.append((start, end))
                if len(self.pending) > self.KEEP:
                    self._resolve(wait=False)
                return fut.value()

            return default_hooks.allreduce_hook(state, bucket).then(finished)

        return timed_allreduce


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_threads(threads: tuple[int, int] | None) -> dict[str, Any]:
    """(intra-op, inter-op) threads from the run's CPU budget (tbdkit.env.cpus), set before any parallel
    work (PyTorch refuses a new inter-op count after it); what PyTorch then reports, for env.json."""
    out: dict[str, Any] = {"requested": None if threads is None else {"intra_op": threads[0], "inter_op": threads[1]}}
    if threads is not None:
        try:
            torch.set_num_threads(threads[0])
            torch.set_num_interop_threads(threads[1])
        except RuntimeError as exc:  # parallel work already started: the defaults stay, and env.json says so
            out["error"] = str(exc)
    out.update(
        intra_op=torch.get_num_threads(),
        inter_op=torch.get_num_interop_threads(),
        method="torch.set_num_threads / set_num_interop_threads, read back with get_num_*",
    )
    return out


class PyTorchAdapter:
    framework = "pytorch"

    def __init__(
        self,
        workload: ModuleType,
        hp: dict[str, Any],
        device: str,
        precision: str,
        seed: int,
        threads: tuple[int, int] | None = None,
        graph: str = "standard",
        compile_backend: str | None = None,
        compile_cache: str = "private",
        parallel: str = "ddp",
    ) -> None:
        self.threads = set_threads(threads)
        seed_everything(seed)
        self.device = resolve_device(device)
        self.device_label = str(self.device)
        self.cuda_index = self.device.index if self.device.type == "cuda" else None
        if self.cuda_index is not None:
            torch.cuda.set_device(self.device)
        self.cudnn_benchmark, self.cudnn_benchmark_reason = cudnn_benchmark(hp)
        torch.backends.cudnn.benchmark = self.cudnn_benchmark and self.cuda_index is not None
        self.precision = Precision(precision, self.device)
        self.workload, self.hp, self.parallel = workload, hp, parallel
        if parallel == "fsdp":
            from tbdkit.adapters.pytorch_fsdp import supports

            if not supports(workload):
                raise RuntimeError("--parallel fsdp: this workload names no layers to shard (shard_units); use ddp")
        self.training = workload.build(hp, self.device)
        self.float8 = None
        if precision == "fp8":
            from tbdkit.adapters.pytorch_float8 import convert

            self.float8 = convert(self.training.model, hp)
        # --graph compiled: the whole train step under torch.compile (inductor unless a test names a cheaper
        # backend), except where workload.toml declares that torch.compile cannot train it (`not_compiled`)
        self.graph = graph
        self.not_compiled = (hp.get("not_compiled") or {}).get("pytorch") if graph == "compiled" else None
        self.compiled = (
            CompiledStep(workload.train_step, hp, compile_backend or BACKEND, cache=compile_cache)
            if graph == "compiled" and not self.not_compiled
            else None
        )
        self._train_step = self.compiled.step if self.compiled is not None else workload.train_step
        self.comm: CommTimer | None = None
        self.comm_reason: str | None = None
        self.backend: str | None = None
        self._sync: Callable[[], None] = (
            (lambda: torch.cuda.synchronize(self.device)) if self.cuda_index is not None else (lambda: None)
        )

    def prepare(self, batch: Any) -> Any:
        return self.workload.to_device(batch, self.device)

    def step(self, inputs: Any) -> Any:
        loss = self._train_step(self.training, inputs, self.precision)
        self._sync()
        return loss

    def compilations(self) -> int | None:
        return self.compiled.compilations() if self.compiled is not None else None

    def compile_record(self) -> dict[str, Any]:
        if self.not_compiled:
            return {"graph": "compiled", "compiler": None, "reason": f"{self.not_compiled}: the run trains eager"}
        if self.compiled is None:
            return {"graph": "standard", "compiler": "none: PyTorch eager (the paper's setting)"}
        return self.compiled.record()

    @contextlib.contextmanager
    def standard_graph(self) -> Any:
        """The eager step for a while: the analyses that attribute work and memory through autograd's and
        the dispatcher's hooks (FLOP counting, the memory breakdown), which a compiled graph bypasses."""
        kept, self._train_step = self._train_step, self.workload.train_step
        try:
            yield
        finally:
            self._train_step = kept

    def loss_value(self, loss: Any) -> float:
        return float(loss.item())

    def infer(self, inputs: Any) -> Any:
        """The workload's inference pass (its `forward`: no loss, no update), outputs as NumPy."""
        return self.workload.forward(self.training, inputs)

    def reset_peaks(self) -> None:
        if self.cuda_index is not None:
            torch.cuda.reset_peak_memory_stats(self.device)
        if self.comm is not None:
            self.comm.reset()

    # Data parallelism: one worker of a torchrun job (tbdkit.agent.distributed).
    def join(self, world_size: int) -> None:
        """Join the job's process group (NCCL on GPUs, gloo on CPUs) and wrap the model in
        DistributedDataParallel, its all-reduces timed by a communication hook; or, under --parallel fsdp,
        shard it with FSDP2 (tbdkit.adapters.pytorch_fsdp)."""
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        self.backend = "nccl" if self.cuda_index is not None else "gloo"
        dist.init_process_group(self.backend, timeout=dt.timedelta(seconds=120))
        if self.parallel == "fsdp":
            from tbdkit.adapters.pytorch_fsdp import shard

            shard(self.training, self.workload, self.hp, self.device)
            self.comm_reason = "FSDP2's all-gathers and reduce-scatters run inside its own hooks: not timed"
            return
        ddp = DistributedDataParallel(
            self.training.model, device_ids=[self.cuda_index] if self.cuda_index is not None else None
        )
        self.comm = CommTimer(cuda=self.backend == "nccl")
        ddp.register_comm_hook(None, self.comm.hook())
        self.training.model = ddp

    def agree(self, flags: list[bool]) -> list[bool]:
        """Each flag true on any worker is true on all: every worker stops at the same iteration."""
        import torch.distributed as dist

        t = torch.tensor(
            [int(f) for f in flags], dtype=torch.int32, device=self.device if self.backend == "nccl" else "cpu"
        )
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [bool(v) for v in t.tolist()]

    def gather(self, value: Any) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(out, value)
        return out

    def leave(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def model_info(self) -> dict[str, Any]:
        model = self.training.model
        info = {
            "parameters": sum(p.numel() for p in model.parameters()),
            "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "non_trainable_state": sum(b.numel() for b in model.buffers()),
            "parallel": self.parallel,
        }
        if self.parallel == "fsdp":
            from tbdkit.adapters.pytorch_fsdp import sharded_info

            info |= sharded_info(model)
        return info

    def shard_memory(self) -> dict[str, Any] | None:
        """Under --parallel fsdp, this rank's weights, gradients and optimizer state shards (bytes); else None."""
        if self.parallel != "fsdp":
            return None
        from tbdkit.adapters.pytorch_fsdp import shard_memory

        return shard_memory(self.training.model, self.training.optimizer)

    def memory(self) -> dict[str, Any]:
        if self.cuda_index is None:
            reason = "the run is on the CPU: PyTorch's CUDA caching allocator is not in use (see peak_rss)"
            return {
                "framework_peak_allocated": metric(None, "MiB", "torch.cuda.max_memory_allocated", reason=reason),
                "framework_peak_reserved": metric(None, "MiB", "torch.cuda.max_memory_reserved", reason=reason),
            }
        mib = 1024 * 1024
        return {
            "framework_peak_allocated": metric(
                torch.cuda.max_memory_allocated(self.device) / mib,
                "MiB",
                "torch.cuda.max_memory_allocated over the sample window (peak stats reset at its start)",
            ),
            "framework_peak_reserved": metric(
                torch.cuda.max_memory_reserved(self.device) / mib,
                "MiB",
                "torch.cuda.max_memory_reserved over the sample window",
            ),
        }

    def memory_breakdown(self, step: Callable[[], Any]) -> dict[str, Any]:
        from tbdkit.adapters.pytorch_profiling import memory_breakdown

        with self.standard_graph():
            return memory_breakdown(self.training, self.device, step)

    def count_flops(self, step: Callable[[], Any]) -> int:
        from tbdkit.adapters.pytorch_profiling import count_flops

        with self.standard_graph():  # the model's FLOPs, whatever a compiler fuses or recomputes
            return count_flops(self.device, step, self.training.model)

    def kernel_trace(self) -> contextlib.AbstractContextManager[dict[str, Any]]:
        from tbdkit.adapters.pytorch_profiling import kernel_trace

        return kernel_trace(self.device)

    @contextlib.contextmanager
    def profiler_range(self) -> Any:
        """The CUDA profiler start/stop range (cudaProfilerStart/Stop) that `ncu --profile-from-start off` profiles."""
        self._sync()
        torch.cuda.profiler.start()
        try:
            yield
            self._sync()
        finally:
            torch.cuda.profiler.stop()

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
            return True
        text = str(exc)
        return isinstance(exc, RuntimeError) and (
            "out of memory" in text or "can't allocate memory" in text or "CUBLAS_STATUS_ALLOC_FAILED" in text
        )

    def environment(self) -> dict[str, Any]:
        cuda = torch.cuda.is_available()
        env: dict[str, Any] = {
            "framework": "pytorch",
            "framework_version": torch.__version__,
            "cuda_runtime": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "cuda_available": cuda,
            "device": self.device_label,
            "device_name": torch.cuda.get_device_name(self.device) if self.cuda_index is not None else "cpu",
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "cudnn_benchmark_reason": self.cudnn_benchmark_reason
            if self.cuda_index is not None
            else "the run is on the CPU: cuDNN is not used",
            "torch_threads": torch.get_num_threads(),
            "threads": {
                **self.threads,
                "intra_op": torch.get_num_threads(),
                "inter_op": torch.get_num_interop_threads(),
            },
            "math_mode": {**self.precision.describe(), **({"float8": self.float8} if self.float8 else {})},
            "graph": self.graph,
            "compile": self.compiled.config() if self.compiled is not None else self.compile_record(),
        }
        if self.cuda_index is not None:
            props = torch.cuda.get_device_properties(self.device)
            env["device_properties"] = {
                "sm_count": props.multi_processor_count,
                "compute_capability": f"{props.major}.{props.minor}",
                "total_memory_mib": props.total_memory // (1024 * 1024),
                "uuid": str(getattr(props, "uuid", "")) or None,
                "pci_bus_id": pci_bus_id(props),
                "identity_source": "torch.cuda.get_device_properties(device).uuid / pci_*_id",
            }
        return env


def make(**kwargs: Any) -> PyTorchAdapter:
    return PyTorchAdapter(**kwargs)
