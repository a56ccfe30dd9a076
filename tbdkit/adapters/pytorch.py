"""PyTorch adapter: device, math mode, seeding, device synchronization and memory statistics."""

from __future__ import annotations

import contextlib
import random
from types import ModuleType
from typing import Any, Callable, ContextManager

import numpy as np
import torch

from tbdkit.metric import metric


class Precision:
    """The math mode of a run: fp32 (TF32 off), tf32 (TF32 matmul and convolutions), amp."""

    def __init__(self, mode: str, device: torch.device) -> None:
        self.mode = mode
        self.device = device
        allow_tf32 = mode == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        torch.backends.cudnn.allow_tf32 = allow_tf32
        torch.set_float32_matmul_precision("high" if allow_tf32 else "highest")
        amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
        self.amp_dtype = amp_dtype if mode == "amp" else None
        self.scaler = torch.amp.GradScaler(device.type, enabled=(mode == "amp" and device.type == "cuda"))

    def autocast(self) -> ContextManager[Any]:
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


def resolve_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was asked for but PyTorch sees no CUDA GPU")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda:0")
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class PyTorchAdapter:
    framework = "pytorch"

    def __init__(self, workload: ModuleType, hp: dict[str, Any], device: str, precision: str, seed: int) -> None:
        seed_everything(seed)
        self.device = resolve_device(device)
        self.device_label = str(self.device)
        self.cuda_index = self.device.index if self.device.type == "cuda" else None
        if self.cuda_index is not None:
            torch.cuda.set_device(self.device)
            torch.backends.cudnn.benchmark = True
        self.precision = Precision(precision, self.device)
        self.workload = workload
        self.training = workload.build(hp, self.device)
        self._sync: Callable[[], None] = (
            (lambda: torch.cuda.synchronize(self.device)) if self.cuda_index is not None else (lambda: None)
        )

    def prepare(self, batch: Any) -> Any:
        return self.workload.to_device(batch, self.device)

    def step(self, inputs: Any) -> Any:
        loss = self.workload.train_step(self.training, inputs, self.precision)
        self._sync()
        return loss

    def loss_value(self, loss: Any) -> float:
        return float(loss.item())

    def reset_peaks(self) -> None:
        if self.cuda_index is not None:
            torch.cuda.reset_peak_memory_stats(self.device)

    def model_info(self) -> dict[str, Any]:
        model = self.training.model
        return {
            "parameters": sum(p.numel() for p in model.parameters()),
            "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "non_trainable_state": sum(b.numel() for b in model.buffers()),
        }

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
                torch.cuda.max_memory_allocated(self.device) / mib, "MiB",
                "torch.cuda.max_memory_allocated over the sample window (peak stats reset at its start)"),
            "framework_peak_reserved": metric(
                torch.cuda.max_memory_reserved(self.device) / mib, "MiB",
                "torch.cuda.max_memory_reserved over the sample window"),
        }

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
            "torch_threads": torch.get_num_threads(),
            "math_mode": self.precision.describe(),
        }
        if self.cuda_index is not None:
            props = torch.cuda.get_device_properties(self.device)
            env["device_properties"] = {
                "sm_count": props.multi_processor_count,
                "compute_capability": f"{props.major}.{props.minor}",
                "total_memory_mib": props.total_memory // (1024 * 1024),
                "uuid": str(getattr(props, "uuid", "")) or None,
            }
        return env


def make(**kwargs: Any) -> PyTorchAdapter:
    return PyTorchAdapter(**kwargs)


def canonical_layers(model: torch.nn.Module, forward: Callable[[], Any]) -> list[Any]:
    """The model's layers in forward order, parameters in tbdkit.canonical's layouts, with the output
    positions each layer's weights were applied at during `forward()` (run on one sample)."""
    from tbdkit.canonical import Layer

    seen: list[tuple[torch.nn.Module, Any]] = []
    kinds = (torch.nn.Conv2d, torch.nn.BatchNorm2d, torch.nn.GRU, torch.nn.Linear)
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append((mod, out)))
             for m in model.modules() if isinstance(m, kinds)]
    try:
        with torch.no_grad():
            forward()
    finally:
        for h in hooks:
            h.remove()
    layers: list[Any] = []

    def np_(t: torch.Tensor) -> np.ndarray:
        return t.detach().cpu().numpy()

    def setter(targets: dict[str, torch.Tensor]) -> Callable[[dict[str, np.ndarray]], None]:
        def assign(arrays: dict[str, np.ndarray]) -> None:
            with torch.no_grad():
                for key, tensor in targets.items():
                    tensor.copy_(torch.from_numpy(np.ascontiguousarray(arrays[key])))
        return assign

    for mod, out in seen:
        if isinstance(mod, torch.nn.Conv2d):
            targets = {"weight": mod.weight} | ({"bias": mod.bias} if mod.bias is not None else {})
            layers.append(Layer("conv2d", {k: np_(v) for k, v in targets.items()},
                                positions=out.shape[2] * out.shape[3], assign=setter(targets)))
        elif isinstance(mod, torch.nn.BatchNorm2d):
            targets = {"gamma": mod.weight, "beta": mod.bias}
            layers.append(Layer("batchnorm", {k: np_(v) for k, v in targets.items()}, assign=setter(targets)))
        elif isinstance(mod, torch.nn.Linear):
            targets = {"weight": mod.weight} | ({"bias": mod.bias} if mod.bias is not None else {})
            layers.append(Layer("dense", {k: np_(v) for k, v in targets.items()},
                                positions=out.numel() // out.shape[-1], assign=setter(targets)))  # one sample
        else:  # GRU: one canonical layer per layer and direction, gates already r, z, n
            data = out[0].data if hasattr(out[0], "batch_sizes") else out[0]
            steps = data.shape[0] if hasattr(out[0], "batch_sizes") else data.shape[1 if mod.batch_first else 0]
            for layer in range(mod.num_layers):
                directions = (("", "forward"), ("_reverse", "backward")) if mod.bidirectional else (("", None),)
                for suffix, direction in directions:
                    targets = {key: getattr(mod, f"{name}_l{layer}{suffix}") for key, name in (
                        ("w_input", "weight_ih"), ("w_hidden", "weight_hh"), ("b_input", "bias_ih"),
                        ("b_hidden", "bias_hh"))}
                    layers.append(Layer("gru", {k: np_(v) for k, v in targets.items()}, positions=int(steps),
                                        direction=direction, assign=setter(targets)))
    return layers

