"""A device-placement check for PyTorch workload code on a machine without a GPU.

On the CPU, a tensor a workload creates without `device=` lands where the model is, so a GPU bug
(`torch.arange(n) >= lengths`, lengths on cuda:0) passes unnoticed. Under `factories_on_meta()`,
every tensor factory called from workload code (workloads/) without a device puts its tensor on the
meta device instead: the first operation that mixes it with the batch's or the model's tensors then
fails as it would on the GPU. Libraries' own host-side tensors (torchvision's random size choice)
keep their default, as they would on a GPU."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode

WORKLOADS = str(Path(__file__).resolve().parents[2] / "workloads")
TORCH = str(Path(torch.__file__).parent) + "/"  # torch itself, not torchvision beside it
FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.rand, torch.randn, torch.randint,
             torch.randperm, torch.tensor, torch.as_tensor, torch.linspace, torch.eye, torch.tril_indices}


def _caller_is_workload() -> bool:
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith((TORCH, __file__)):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(WORKLOADS)


class _FactoriesOnMeta(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.moved: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None and _caller_is_workload():
            self.moved.append(func.__name__)
            kwargs = {**kwargs, "device": "meta"}
        return func(*args, **kwargs)


@contextlib.contextmanager
def factories_on_meta() -> Iterator[_FactoriesOnMeta]:
    with _FactoriesOnMeta() as mode:
        yield mode
