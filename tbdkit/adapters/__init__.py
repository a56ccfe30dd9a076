"""The framework-specific half of the agent: one adapter per framework stack.

Every adapter implements the core `Adapter` protocol. What only some frameworks can do is an
optional capability, a protocol of its own; `capabilities(adapter)` checks them once and the
agent asks the result (`caps.kernel_trace is None`), never the adapter's attributes."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Adapter(Protocol):
    """What the agent's loop needs from every framework; everything else is shared."""

    framework: str
    device_label: str  # "cpu", "cuda:0", ...
    cuda_index: int | None  # the run's GPU as a CUDA ordinal of this process, None on CPU (collectors find
    # it in NVML by the UUID / PCI bus id in environment()['device_properties'])

    def prepare(self, batch: Any) -> Any: ...
    def step(self, inputs: Any) -> Any: ...  # trains one step, waits for the device; the loss
    def loss_value(self, loss: Any) -> float: ...
    def environment(self) -> dict[str, Any]: ...
    def model_info(self) -> dict[str, Any]: ...
    def memory(self) -> dict[str, Any]: ...
    def is_oom(self, exc: BaseException) -> bool: ...


# The optional capabilities, each one protocol.


@runtime_checkable
class PeakReset(Protocol):
    def reset_peaks(self) -> None: ...  # the allocator's peak restarts at the window


@runtime_checkable
class MemoryBreakdown(Protocol):
    def memory_breakdown(self, step: Callable[[], Any]) -> dict[str, Any]: ...  # {"categories", "peak"}


@runtime_checkable
class OptimizerState(Protocol):
    def optimizer_state_bytes(self) -> int | None: ...


@runtime_checkable
class FlopCount(Protocol):
    def count_flops(self, step: Callable[[], Any]) -> int: ...


@runtime_checkable
class KernelTrace(Protocol):
    def kernel_trace(self) -> ContextManager[dict[str, Any]]: ...  # {"kernels", "elapsed_us"} on exit


@runtime_checkable
class ProfilerRange(Protocol):
    def profiler_range(self) -> ContextManager[Any]: ...  # the external profiler's (ncu's) start/stop range


@runtime_checkable
class Inference(Protocol):
    def infer(self, inputs: Any) -> Any: ...  # held-out outputs, for a convergence run's quality


@runtime_checkable
class GraphCompile(Protocol):
    """How the adapter runs its train step (--graph standard | compiled) and what its compiler did."""

    graph: str  # "standard" or "compiled"

    def compilations(self) -> int | None: ...  # compilations of the step so far; None where uncounted
    def compile_record(self) -> dict[str, Any]: ...  # env.json's and summary.json's `compile`


@runtime_checkable
class Distributed(Protocol):
    """A worker of a data-parallel job: joins the process group, agrees on decisions, gathers results."""

    backend: str | None
    comm: Any  # the communication timer (.seconds, .method), None before join()

    def join(self, world_size: int) -> None: ...
    def agree(self, flags: list[bool]) -> list[bool]: ...
    def gather(self, value: Any) -> list[Any]: ...
    def leave(self) -> None: ...


@runtime_checkable
class ParameterSync(Protocol):
    """A worker of a data-parallel job whose framework keeps the parameters in sync (TensorFlow's
    MultiWorkerMirroredStrategy, MXNet's dist_sync kvstore) while the agent's control channel
    carries the workers' decisions (tbdkit.agent.distributed.WithControl)."""

    backend: str | None
    comm: Any  # the communication timer (.seconds, .method), or None
    comm_reason: str | None  # why communication is not timed, where comm is None

    def join(self, world_size: int) -> None: ...
    def leave(self) -> None: ...


@runtime_checkable
class ChannelSync(Protocol):
    """A ParameterSync whose gradients travel over the agent's control channel itself (the NumPy stack, which has
    no communication library): WithControl hands it the channel's gather before it joins."""

    def use_channel(self, exchange: Callable[[Any], list[Any]]) -> None: ...


@runtime_checkable
class Replicas(Protocol):
    """Several replicas in one process (--one-process: MirroredStrategy, MXNet's device kvstore): how
    they exchange gradients, and why that exchange is not timed; `replica_devices` names the replicas' devices
    (a data-parallel worker's adapter has a backend and a reason too, but no replicas of its own)."""

    backend: str | None
    comm_reason: str | None
    replica_devices: list[Any]


@dataclass(frozen=True)
class Capabilities:
    """One adapter's optional capabilities, each the adapter itself or None where it lacks it."""

    peak_reset: PeakReset | None
    memory_breakdown: MemoryBreakdown | None
    optimizer_state: OptimizerState | None
    flop_count: FlopCount | None
    kernel_trace: KernelTrace | None
    profiler_range: ProfilerRange | None
    inference: Inference | None
    graph_compile: GraphCompile | None
    distributed: Distributed | None
    parameter_sync: ParameterSync | None
    replicas: Replicas | None = None


def capabilities(adapter: Any) -> Capabilities:
    """Check once which optional capabilities `adapter` has."""

    def of(kind: type) -> Any:
        return adapter if isinstance(adapter, kind) else None

    return Capabilities(
        peak_reset=of(PeakReset),
        memory_breakdown=of(MemoryBreakdown),
        optimizer_state=of(OptimizerState),
        flop_count=of(FlopCount),
        kernel_trace=of(KernelTrace),
        profiler_range=of(ProfilerRange),
        inference=of(Inference),
        graph_compile=of(GraphCompile),
        distributed=of(Distributed),
        # an adapter that carries the workers' decisions itself (Distributed) needs no control channel
        parameter_sync=None if of(Distributed) else of(ParameterSync),
        replicas=of(Replicas),
    )


def load(framework: str, **kwargs: Any) -> Adapter:
    module = importlib.import_module(f"tbdkit.adapters.{framework}")
    adapter = module.make(**kwargs)
    if not isinstance(adapter, Adapter):
        missing = [
            n
            for n in (
                "framework",
                "device_label",
                "cuda_index",
                "prepare",
                "step",
                "loss_value",
                "environment",
                "model_info",
                "memory",
                "is_oom",
            )
            if not hasattr(adapter, n)
        ]
        raise TypeError(f"tbdkit.adapters.{framework} does not implement the adapter protocol: lacks {missing}")
    return adapter
