"""`--precision fp8` on PyTorch: the model's linear layers swapped for torchao's Float8Linear
(torchao.float8.convert_to_float8_training, its default recipe: dynamic tensorwise scaling, inputs and
weights in float8 e4m3, gradients in e5m2, matmuls by torch._scaled_mm), the rest under bf16 autocast.

Float8Linear.from_float keeps the original weight and bias Parameters (torchao/float8/float8_linear.py), so
the optimizer the workload built goes on updating them. As torchtitan does, a layer is converted only where
torch._scaled_mm can take it (both dimensions multiples of 16) and the model's output projection is left out
(hp["fp8_skip"]: module names, e.g. transformers' lm_head): it is the layer float8 hurts most.
"""

from __future__ import annotations

from typing import Any

import torch

ALIGNMENT = 16  # torch._scaled_mm: both matrix dimensions multiples of 16


def convertible(module: torch.nn.Module, name: str, skip: tuple[str, ...]) -> bool:
    if not isinstance(module, torch.nn.Linear):
        return False
    if any(name == s or name.endswith("." + s) for s in skip):
        return False
    return module.in_features % ALIGNMENT == 0 and module.out_features % ALIGNMENT == 0


def convert(model: torch.nn.Module, hp: dict[str, Any]) -> dict[str, Any]:
    """Swap the model's convertible linear layers in place; what was converted, for the run's record."""
    from torchao.float8 import convert_to_float8_training  # type: ignore[import-not-found, unused-ignore]

    skip = tuple(hp.get("fp8_skip", ()))
    linear = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    convert_to_float8_training(model, module_filter_fn=lambda m, name: convertible(m, name, skip))
    converted = [n for n, m in model.named_modules() if type(m).__name__ == "Float8Linear"]
    return {
        "library": "torchao.float8",
        "converted": len(converted),
        "linear_layers": len(linear),
        "kept": sorted(set(linear) - set(converted)),
    }
