"""--parallel fsdp: FSDP2 (torch.distributed.fsdp.fully_shard) over the job's process group. Each of the
workload's shard units (its `shard_units`, e.g. Llama's decoder layers) is sharded, then the whole model (the
embeddings, the final norm, the output projection), as torchtitan applies it; the optimizer and its schedule are
built again after (the workload's `optimize`), since fully_shard replaces each Parameter with a DTensor holding
this rank's shard. Gradients are reduce-scattered and averaged over the ranks, as DDP's all-reduce averages them,
so a rank's losses match DDP's for the same seed up to the order of floating-point sums."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch


def supports(workload: ModuleType) -> bool:
    return hasattr(workload, "shard_units") and hasattr(workload, "optimize")


def shard(training: Any, workload: ModuleType, hp: dict[str, Any], device: torch.device) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for unit in workload.shard_units(training.model):
        fully_shard(unit, mesh=mesh)
    fully_shard(training.model, mesh=mesh)
    training.optimizer, training.schedule = workload.optimize(hp, training.model)


def local_numel(p: torch.Tensor) -> int:
    """Elements this rank holds: a DTensor's local shard, a plain tensor's whole."""
    from torch.distributed.tensor import DTensor

    return p.to_local().numel() if isinstance(p, DTensor) else p.numel()


def sharded_info(model: torch.nn.Module) -> dict[str, Any]:
    params = list(model.parameters())
    return {
        "local_parameters": sum(local_numel(p) for p in params),
        "local_parameter_bytes": sum(local_numel(p) * p.element_size() for p in params),
        "local_method": "FSDP2: the elements of each parameter's DTensor shard on this rank (DTensor.to_local)",
    }


SHARD_MEMORY_METHOD = (
    "FSDP2, after the sample window: the bytes of this rank's shard of each parameter, of each gradient and of each "
    "optimizer state tensor (DTensor.to_local; a plain tensor whole)"
)


def local_bytes(t: torch.Tensor) -> int:
    return local_numel(t) * t.element_size()


def shard_memory(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """This rank's memory breakdown under FSDP2: its weights', gradients' and optimizer state's shards, in bytes
    (AdamW's two moments and step counters; gradients as the last step left them)."""
    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return {
        "weights": sum(local_bytes(p) for p in params),
        "weight_gradients": sum(local_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer_state": sum(local_bytes(v) for v in state),
        "method": SHARD_MEMORY_METHOD,
    }
