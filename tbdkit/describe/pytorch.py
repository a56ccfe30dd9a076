"""PyTorch's network in canonical form (tbdkit.describe.canonical): its layers in forward order,
their parameters in the canonical layouts, for `tbdkit describe` and the parity tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch


def canonical_layers(model: torch.nn.Module, forward: Callable[[], Any]) -> list[Any]:
    """The model's layers in forward order, parameters in tbdkit.describe.canonical's layouts, with the output
    positions each layer's weights were applied at during `forward()` (run on one sample), summed over
    the layer's calls. A dense layer reusing an earlier layer's weight (BERT's decoder, tied to the word
    embeddings) lists that weight as tied, not as a parameter of its own. Learned scalars held by the
    model itself come last, as "scale" layers, and after them the learned tensors no layer above holds
    (ViT's class token and positions), as "tensor" layers in the order the model names them."""
    from tbdkit.describe.canonical import Layer

    seen: dict[int, tuple[torch.nn.Module, int]] = {}  # insertion order = order of first call
    kinds = (
        torch.nn.Conv2d,
        torch.nn.ConvTranspose2d,
        torch.nn.BatchNorm2d,
        torch.nn.GRU,
        torch.nn.LSTM,
        torch.nn.LSTMCell,
        torch.nn.Linear,
        torch.nn.Embedding,
        torch.nn.LayerNorm,
        torch.nn.GroupNorm,
        torch.nn.MultiheadAttention,
    )
    # Attention's key/value projections apply at the key positions, its query and output ones at the
    # query positions (they differ in a decoder's cross-attention): summed over calls, by module.
    key_positions: dict[int, int] = {}

    def positions(mod: torch.nn.Module, out: Any) -> int:
        if isinstance(mod, torch.nn.Conv2d):
            return int(
                out.shape[0] * out.shape[2] * out.shape[3]
            )  # every map in the batch (a detector head: one per RoI)
        if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
            return int(out.numel() // out.shape[-1])
        if isinstance(mod, torch.nn.LSTMCell):
            return int(out[0].shape[0])
        if isinstance(mod, (torch.nn.GRU, torch.nn.LSTM)):
            if hasattr(out[0], "batch_sizes"):
                return int(out[0].data.shape[0])
            return int(out[0].shape[1 if mod.batch_first else 0])
        return 0

    def record(mod: torch.nn.Module, args: Any, out: Any) -> None:
        prev = seen.get(id(mod), (mod, 0))[1]
        if isinstance(mod, torch.nn.MultiheadAttention):
            query, key = args[0], args[1]

            def tokens(x: Any) -> int:
                return int(x.shape[0] * x.shape[1]) if x.dim() == 3 else int(x.shape[0])

            seen[id(mod)] = (mod, prev + tokens(query))
            key_positions[id(mod)] = key_positions.get(id(mod), 0) + tokens(key)
            return
        if isinstance(mod, torch.nn.ConvTranspose2d):  # counted at its input (canonical.LAYOUTS)
            seen[id(mod)] = (mod, prev + int(args[0].shape[0] * args[0].shape[2] * args[0].shape[3]))
            return
        seen[id(mod)] = (mod, prev + positions(mod, out))

    # a module holding fusion weights (effdet's FpnCombine.edge_weights) is a "fusion" layer
    def fusion(mod: torch.nn.Module) -> bool:
        return isinstance(getattr(mod, "edge_weights", None), torch.nn.Parameter)

    # RMSNorm: torch's own, or a library's of that name holding a `weight` (transformers' LlamaRMSNorm)
    def rms_norm(mod: torch.nn.Module) -> bool:
        return type(mod).__name__.endswith("RMSNorm") and isinstance(getattr(mod, "weight", None), torch.nn.Parameter)

    hooks = [
        m.register_forward_hook(record) for m in model.modules() if isinstance(m, kinds) or fusion(m) or rms_norm(m)
    ]
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

    def add(
        kind: str,
        targets: dict[str, torch.Tensor],
        n: int,
        direction: str | None = None,
        tied: dict[str, tuple[int, ...]] | None = None,
    ) -> None:
        layers.append(
            Layer(
                kind,
                {k: np_(v) for k, v in targets.items()},
                positions=n,
                direction=direction,
                tied=tied or {},
                assign=setter(targets),
            )
        )

    def with_bias(mod: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {"bias": mod.bias} if mod.bias is not None else {}

    recurrent = (("w_input", "weight_ih"), ("w_hidden", "weight_hh"), ("b_input", "bias_ih"), ("b_hidden", "bias_hh"))
    owned: set[int] = set()  # parameters an earlier layer holds: a later use is a tie, not a parameter
    for mod, n in seen.values():
        tied = isinstance(mod, torch.nn.Linear) and id(mod.weight) in owned
        owned.update(id(t) for t in mod.parameters(recurse=False))
        if fusion(mod):
            add("fusion", {"weights": mod.edge_weights}, 0)
        elif tied:
            add("dense", with_bias(mod), n, tied={"weight": tuple(mod.weight.shape)})
        elif isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            add("conv2d" if isinstance(mod, torch.nn.Conv2d) else "dense", {"weight": mod.weight} | with_bias(mod), n)
        elif isinstance(mod, torch.nn.ConvTranspose2d):
            if mod.groups != 1 or mod.dilation != (1, 1):
                raise ValueError("a grouped or dilated ConvTranspose2d has no canonical layout")
            add("conv_transpose2d", {"weight": mod.weight} | with_bias(mod), n)
        elif isinstance(mod, torch.nn.BatchNorm2d):  # without scale/offset where the model has none (MiniGo's heads)
            add("batchnorm", {k: v for k, v in (("gamma", mod.weight), ("beta", mod.bias)) if v is not None}, n)
        elif rms_norm(mod):
            add("rmsnorm", {"gamma": mod.weight}, n)
        elif isinstance(mod, torch.nn.LayerNorm):  # without scale and shift where it has none (DiT's adaptive norms)
            add("layernorm", {k: v for k, v in (("gamma", mod.weight), ("beta", mod.bias)) if v is not None}, n)
        elif isinstance(mod, torch.nn.GroupNorm):  # one group over (C, H, W) is a layer norm (WGAN-GP's critic)
            if mod.num_groups != 1:
                raise ValueError(
                    f"GroupNorm with {mod.num_groups} groups has no canonical layout (only 1 group: a layer norm)"
                )
            add("layernorm", {"gamma": mod.weight, "beta": mod.bias}, n)
        elif isinstance(mod, torch.nn.Embedding):
            add("embedding", {"weight": mod.weight}, n)
        elif isinstance(mod, torch.nn.MultiheadAttention):
            # Four dense layers, as every framework writes attention out: query, key, value (rows of the
            # packed in_proj, (3d, d)) and the output projection, which MHA applies itself (no hook fires).
            if mod.in_proj_weight is None:
                raise ValueError(
                    "MultiheadAttention with separate q/k/v weights (kdim/vdim) has no canonical layout here"
                )
            d = mod.embed_dim
            for i, at in enumerate((n, key_positions[id(mod)], key_positions[id(mod)])):
                rows = slice(i * d, (i + 1) * d)
                bias = {"bias": mod.in_proj_bias[rows]} if mod.in_proj_bias is not None else {}
                add("dense", {"weight": mod.in_proj_weight[rows]} | bias, at)
            add("dense", {"weight": mod.out_proj.weight} | with_bias(mod.out_proj), n)
        elif isinstance(mod, torch.nn.LSTMCell):  # gates already i, f, g, o
            add("lstm", {key: getattr(mod, name) for key, name in recurrent}, n)
        else:  # GRU / LSTM: one canonical layer per layer and direction, gates already r, z, n / i, f, g, o
            kind = "gru" if isinstance(mod, torch.nn.GRU) else "lstm"
            for layer in range(mod.num_layers):
                directions = (("", "forward"), ("_reverse", "backward")) if mod.bidirectional else (("", None),)
                for suffix, direction in directions:
                    add(kind, {key: getattr(mod, f"{name}_l{layer}{suffix}") for key, name in recurrent}, n, direction)
    for _, p in model.named_parameters(recurse=False):
        if p.numel() == 1:
            add("scale", {"value": p.reshape(())}, 0)
    # a module of none of the kinds above holding a trainable tensor of its own (not a scalar of the model's)
    for owner in model.modules():
        if isinstance(owner, kinds) or fusion(owner) or rms_norm(owner):
            continue
        for p in owner.parameters(recurse=False):
            if p.requires_grad and p.numel() > 1 and id(p) not in owned:
                add("tensor", {"value": p}, 0)
    return layers
