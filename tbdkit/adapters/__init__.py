"""The framework-specific half of the agent: one adapter per framework stack."""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable


class Adapter(Protocol):
    """What the agent's loop needs from a framework; everything else is shared."""

    framework: str
    device_label: str        # "cpu", "cuda:0", ...
    cuda_index: int | None   # the run's GPU as a CUDA ordinal of this process, None on CPU (collectors find
                             # it in NVML by the UUID / PCI bus id in environment()['device_properties'])

    def prepare(self, batch: Any) -> Any: ...
    def step(self, inputs: Any) -> float | None: ...     # trains one step, waits for the device
    def loss_value(self, loss: Any) -> float: ...
    def environment(self) -> dict[str, Any]: ...
    def model_info(self) -> dict[str, Any]: ...
    def memory(self) -> dict[str, Any]: ...
    def is_oom(self, exc: BaseException) -> bool: ...


@runtime_checkable
class Distributed(Adapter, Protocol):
    """An adapter that runs one worker of a data-parallel job (PyTorch's): what the agent calls on it."""

    comm: Any              # the gradient-communication timer (.seconds, .method), None before join()
    backend: str | None    # the process group's backend, None before join()

    def join(self, world_size: int) -> None: ...
    def agree(self, flags: list[bool]) -> list[bool]: ...   # every worker's flags, OR-ed
    def gather(self, value: Any) -> list[Any]: ...
    def leave(self) -> None: ...


def load(framework: str, **kwargs: Any) -> Adapter:
    module = importlib.import_module(f"tbdkit.adapters.{framework}")
    return module.make(**kwargs)
