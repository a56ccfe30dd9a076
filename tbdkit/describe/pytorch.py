"""PyTorch's network in canonical form (tbdkit.describe.canonical): its layers in forward order,
their parameters in the canonical layouts, for `tbdkit describe` and the parity tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

# The modules whose weights are canonical layers (a module holding fusion weights is one too: fusion()).
KINDS = (
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
RECURRENT = (("w_input", "weight_ih"), ("w_hidden", "weight_hh"), ("b_input", "bias_ih"), ("b_hidden", "bias_hh"))


def canonical_layers(model: torch.nn.Module, forward: Callable[[], Any]) -> list[Any]:
    """The model's layers in forward order, parameters in tbdkit.describe.canonical's layouts, with the output
    positions each layer's weights were applied at during `forward()` (run on one sample), summed over
    the layer's calls. A dense layer reusing an earlier layer's weight (BERT's decoder, tied to the word
    embeddings) lists that weight as tied, not as a parameter of its own. Learned scalars held by the
    model itself come last, as "scale" layers, and after them the learned tensors no layer above holds
    (ViT's class token and positions), as "tensor" layers in the order the model names them."""
    calls = _Calls()
    hooks = [m.register_forward_hook(calls.record) for m in model.modules() if _is_layer(m)]
    try:
        with torch.no_grad():
            forward()
    finally:
        for h in hooks:
            h.remove()
    layers: list[Any] = []
    owned: set[int] = set()  # parameters an earlier layer holds: a later use is a tie, not a parameter
    for mod, n in calls.seen.values():
        tied = isinstance(mod, torch.nn.Linear) and id(mod.weight) in owned
        owned.update(id(t) for t in mod.parameters(recurse=False))
        layers.extend(_layers_of(mod, n, tied, calls.key_positions))
    for _, p in model.named_parameters(recurse=False):
        if p.numel() == 1:
            layers.append(_layer("scale", {"value": p.reshape(())}, 0))
    # a module of none of the kinds above holding a trainable tensor of its own (not a scalar of the model's)
    for owner in model.modules():
        if _is_layer(owner):
            continue
        for p in owner.parameters(recurse=False):
            if p.requires_grad and p.numel() > 1 and id(p) not in owned:
                layers.append(_layer("tensor", {"value": p}, 0))
    return layers


def _is_layer(mod: torch.nn.Module) -> bool:
    """Whether `mod`'s weights are a canonical layer of their own."""
    return isinstance(mod, KINDS) or fusion(mod) or rms_norm(mod)


def fusion(mod: torch.nn.Module) -> bool:
    """A module holding fusion weights (effdet's FpnCombine.edge_weights): a "fusion" layer."""
    return isinstance(getattr(mod, "edge_weights", None), torch.nn.Parameter)


def rms_norm(mod: torch.nn.Module) -> bool:
    """RMSNorm: torch's own, or a library's of that name holding a `weight` (transformers' LlamaRMSNorm)."""
    return type(mod).__name__.endswith("RMSNorm") and isinstance(getattr(mod, "weight", None), torch.nn.Parameter)


def _positions(mod: torch.nn.Module, out: Any) -> int:
    """The output positions one call of `mod` applied its weights at."""
    if isinstance(mod, torch.nn.Conv2d):
        return int(out.shape[0] * out.shape[2] * out.shape[3])  # every map in the batch (a detector head: one per RoI)
    if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
        return int(out.numel() // out.shape[-1])
    if isinstance(mod, torch.nn.LSTMCell):
        return int(out[0].shape[0])
    if isinstance(mod, (torch.nn.GRU, torch.nn.LSTM)):
        if hasattr(out[0], "batch_sizes"):
            return int(out[0].data.shape[0])
        return int(out[0].shape[1 if mod.batch_first else 0])
    return 0


def _tokens(x: Any) -> int:
    return int(x.shape[0] * x.shape[1]) if x.dim() == 3 else int(x.shape[0])


class _Calls:
    """Each layer module in order of its first call, with its positions summed over its calls. Attention's
    key/value projections apply at the key positions, its query and output ones at the query positions
    (they differ in a decoder's cross-attention): summed over calls, by module."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[torch.nn.Module, int]] = {}  # insertion order = order of first call
        self.key_positions: dict[int, int] = {}

    def record(self, mod: torch.nn.Module, args: Any, out: Any) -> None:
        prev = self.seen.get(id(mod), (mod, 0))[1]
        if isinstance(mod, torch.nn.MultiheadAttention):
            query, key = args[0], args[1]
            self.seen[id(mod)] = (mod, prev + _tokens(query))
            self.key_positions[id(mod)] = self.key_positions.get(id(mod), 0) + _tokens(key)
            return
        if isinstance(mod, torch.nn.ConvTranspose2d):  # counted at its input (canonical.LAYOUTS)
            self.seen[id(mod)] = (mod, prev + int(args[0].shape[0] * args[0].shape[2] * args[0].shape[3]))
            return
        self.seen[id(mod)] = (mod, prev + _positions(mod, out))


def _setter(targets: dict[str, torch.Tensor]) -> Callable[[dict[str, np.ndarray]], None]:
    def assign(arrays: dict[str, np.ndarray]) -> None:
        with torch.no_grad():
            for key, tensor in targets.items():
                tensor.copy_(torch.from_numpy(np.ascontiguousarray(arrays[key])))

    return assign


def _layer(
    kind: str,
    targets: dict[str, torch.Tensor],
    n: int,
    direction: str | None = None,
    tied: dict[str, tuple[int, ...]] | None = None,
) -> Any:
    from tbdkit.describe.canonical import Layer

    arrays = {k: v.detach().cpu().numpy() for k, v in targets.items()}
    return Layer(kind, arrays, positions=n, direction=direction, tied=tied or {}, assign=_setter(targets))


def _with_bias(mod: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {"bias": mod.bias} if mod.bias is not None else {}


def _layers_of(mod: torch.nn.Module, n: int, tied: bool, key_positions: dict[int, int]) -> list[Any]:
    """The canonical layers of one module applied at `n` positions (`tied`: its weight is an earlier layer's)."""
    if fusion(mod):
        return [_layer("fusion", {"weights": mod.edge_weights}, 0)]
    if tied:
        return [_layer("dense", _with_bias(mod), n, tied={"weight": tuple(mod.weight.shape)})]
    if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
        kind = "conv2d" if isinstance(mod, torch.nn.Conv2d) else "dense"
        return [_layer(kind, {"weight": mod.weight} | _with_bias(mod), n)]
    if isinstance(mod, torch.nn.ConvTranspose2d):
        if mod.groups != 1 or mod.dilation != (1, 1):
            raise ValueError("a grouped or dilated ConvTranspose2d has no canonical layout")
        return [_layer("conv_transpose2d", {"weight": mod.weight} | _with_bias(mod), n)]
    if isinstance(mod, torch.nn.BatchNorm2d):  # without scale/offset where the model has none (MiniGo's heads)
        return [_layer("batchnorm", {k: v for k, v in (("gamma", mod.weight), ("beta", mod.bias)) if v is not None}, n)]
    if rms_norm(mod):
        return [_layer("rmsnorm", {"gamma": mod.weight}, n)]
    if isinstance(mod, torch.nn.LayerNorm):  # without scale and shift where it has none (DiT's adaptive norms)
        return [_layer("layernorm", {k: v for k, v in (("gamma", mod.weight), ("beta", mod.bias)) if v is not None}, n)]
    if isinstance(mod, torch.nn.GroupNorm):  # one group over (C, H, W) is a layer norm (WGAN-GP's critic)
        if mod.num_groups != 1:
            raise ValueError(
                f"GroupNorm with {mod.num_groups} groups has no canonical layout (only 1 group: a layer norm)"
            )
        return [_layer("layernorm", {"gamma": mod.weight, "beta": mod.bias}, n)]
    if isinstance(mod, torch.nn.Embedding):
        return [_layer("embedding", {"weight": mod.weight}, n)]
    if isinstance(mod, torch.nn.MultiheadAttention):
        return _attention(mod, n, key_positions[id(mod)])
    if isinstance(mod, torch.nn.LSTMCell):  # gates already i, f, g, o
        return [_layer("lstm", {key: getattr(mod, name) for key, name in RECURRENT}, n)]
    return _recurrent(mod, n)


def _attention(mod: torch.nn.MultiheadAttention, n: int, keys: int) -> list[Any]:
    """Four dense layers, as every framework writes attention out: query, key, value (rows of the packed
    in_proj, (3d, d)) and the output projection, which MHA applies itself (no hook fires)."""
    if mod.in_proj_weight is None:
        raise ValueError("MultiheadAttention with separate q/k/v weights (kdim/vdim) has no canonical layout here")
    d = mod.embed_dim
    layers = []
    for i, at in enumerate((n, keys, keys)):
        rows = slice(i * d, (i + 1) * d)
        bias = {"bias": mod.in_proj_bias[rows]} if mod.in_proj_bias is not None else {}
        layers.append(_layer("dense", {"weight": mod.in_proj_weight[rows]} | bias, at))
    layers.append(_layer("dense", {"weight": mod.out_proj.weight} | _with_bias(mod.out_proj), n))
    return layers


def _recurrent(mod: torch.nn.Module, n: int) -> list[Any]:
    """GRU / LSTM: one canonical layer per layer and direction, gates already r, z, n / i, f, g, o."""
    kind = "gru" if isinstance(mod, torch.nn.GRU) else "lstm"
    layers = []
    for layer in range(mod.num_layers):
        directions = (("", "forward"), ("_reverse", "backward")) if mod.bidirectional else (("", None),)
        for suffix, direction in directions:
            layers.append(
                _layer(kind, {key: getattr(mod, f"{name}_l{layer}{suffix}") for key, name in RECURRENT}, n, direction)
            )
    return layers
