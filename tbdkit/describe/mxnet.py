"""MXNet's (Gluon) network in canonical form (tbdkit.describe.canonical): its layers in forward
order, their parameters in the canonical layouts, for `tbdkit describe` and the parity tests."""

from __future__ import annotations

from typing import Any

import mxnet as mx
import numpy as np


def canonical_layers(model: Any, forward: Any) -> list[Any]:
    """The model's layers in forward order, parameters in tbdkit.describe.canonical's layouts, with the output
    positions each layer's weights were applied at during `forward()` (run imperatively on one sample),
    summed over the layer's calls. A block with a `tied_to` embedding is a dense layer using that
    embedding's table as its weight (BERT's decoder). Learned scalars the model registers itself come
    last ("scale"). A block holding `edge_weights` (BiFPN's fast normalized fusion) is a "fusion" layer.
    Grouped and depthwise Conv2D weights are already PyTorch's grouped layout (out, in / groups, kh, kw).

    A one-direction GRU or LSTM cell that serves as half of a bidirectional layer says which half
    in a `direction` attribute ("forward" / "backward"); a fused bidirectional GRU is split here."""
    from mxnet import gluon

    kinds = (
        gluon.nn.Conv2D,
        gluon.nn.Conv2DTranspose,
        gluon.nn.BatchNorm,
        gluon.nn.Dense,
        gluon.rnn.GRU,
        gluon.rnn.LSTMCell,
        gluon.nn.Embedding,
        gluon.nn.LayerNorm,
    )
    blocks: list[Any] = []

    def walk(block: Any) -> None:
        if isinstance(block, kinds) or hasattr(block, "tied_to") or fusion(block):
            blocks.append(block)
        for child in block._children.values():
            walk(child)

    walk(model)
    seen: dict[int, tuple[Any, int]] = {}  # insertion order = order of first call

    def record(block: Any, args: Any, out: Any) -> None:
        seen[id(block)] = (block, seen.get(id(block), (block, 0))[1] + _positions(block, args, out))

    handles = [b.register_forward_hook(record) for b in blocks]
    model.hybridize(active=False)  # hooks fire only in imperative mode
    try:
        forward()
    finally:
        for h in handles:
            h.detach()
    layers = [layer for block, n in seen.values() for layer in _layers_of(block, n)]
    for param in model._reg_params.values():
        if param.grad_req != "null" and int(np.prod(param.shape)) == 1:
            layers.append(_layer("scale", {"value": param}, 0, shape=()))
    return layers


RECURRENT = (
    ("w_input", "i2h_weight"),
    ("w_hidden", "h2h_weight"),
    ("b_input", "i2h_bias"),
    ("b_hidden", "h2h_bias"),
)


def fusion(block: Any) -> bool:
    """A block holding `edge_weights` (BiFPN's fast normalized fusion): a "fusion" layer."""
    return isinstance(getattr(block, "edge_weights", None), mx.gluon.Parameter)


def _positions(block: Any, args: Any, out: Any) -> int:
    """The output positions one call of `block` applied its weights at."""
    gluon = mx.gluon
    if hasattr(block, "tied_to"):
        return int(np.prod(out.shape[:-1]))
    if isinstance(block, gluon.nn.Conv2DTranspose):  # counted at its input (canonical.LAYOUTS)
        return int(args[0].shape[0] * args[0].shape[2] * args[0].shape[3])
    if isinstance(block, gluon.nn.Conv2D):
        return int(out.shape[0] * out.shape[2] * out.shape[3])  # every map in the batch (a detector head: one per RoI)
    if isinstance(block, (gluon.nn.Dense, gluon.nn.Embedding)):
        return int(np.prod(out.shape[:-1]))
    if isinstance(block, gluon.rnn.LSTMCell):
        return int(out[0].shape[0])
    if isinstance(block, gluon.rnn.GRU):
        sequence = out[0] if isinstance(out, (list, tuple)) else out
        return int(sequence.shape[0 if block._layout == "TNC" else 1])
    return 0


def _setter(targets: dict[str, Any]) -> Any:
    def assign(arrays: dict[str, np.ndarray]) -> None:
        for key, param in targets.items():
            param.set_data(mx.nd.array(np.reshape(arrays[key], param.shape), dtype=param.dtype))

    return assign


def _layer(
    kind: str,
    targets: dict[str, Any],
    n: int,
    direction: str | None = None,
    tied: dict[str, tuple[int, ...]] | None = None,
    shape: tuple[int, ...] | None = None,
) -> Any:
    """One canonical layer of `targets` (gluon Parameters); `shape`: each array reshaped (a scalar's ())."""
    from tbdkit.describe.canonical import Layer

    arrays = {k: p.data().asnumpy() for k, p in targets.items()}
    if shape is not None:
        arrays = {k: a.reshape(shape) for k, a in arrays.items()}
    return Layer(kind, arrays, positions=n, direction=direction, tied=tied or {}, assign=_setter(targets))


def _layers_of(block: Any, n: int) -> list[Any]:
    """The canonical layers of one block applied at `n` positions."""
    gluon = mx.gluon
    if fusion(block):  # one weight per input, element-wise work
        return [_layer("fusion", {"weights": block.edge_weights}, 0)]
    if hasattr(block, "tied_to"):
        # with a bias of its own (BERT's decoder) or none (the Transformer's projection)
        bias = {"bias": block.bias} if getattr(block, "bias", None) is not None else {}
        return [_layer("dense", bias, n, tied={"weight": tuple(block.tied_to.weight.shape)})]
    if isinstance(block, (gluon.nn.Conv2D, gluon.nn.Conv2DTranspose, gluon.nn.Dense)):
        return [_weighted(block, n)]
    if isinstance(block, gluon.nn.BatchNorm):
        # scale=False / center=False keep gamma / beta as fixed state (grad_req 'null'), not parameters
        targets = {k: p for k, p in (("gamma", block.gamma), ("beta", block.beta)) if p.grad_req != "null"}
        return [_layer("batchnorm", targets, 0)]
    if isinstance(block, gluon.nn.LayerNorm):
        return [_layer("layernorm", {"gamma": block.gamma, "beta": block.beta}, 0)]
    if isinstance(block, gluon.nn.Embedding):
        return [_layer("embedding", {"weight": block.weight}, n)]
    if isinstance(block, gluon.rnn.LSTMCell):  # gates i, f, c, o: already canonical
        targets = {key: getattr(block, name) for key, name in RECURRENT}
        return [_layer("lstm", targets, n, direction=getattr(block, "direction", None))]
    return _gru(block, n)


def _weighted(block: Any, n: int) -> Any:
    """A Conv2D, Conv2DTranspose or Dense: its weight and bias (Conv2DTranspose's (in, out, kh, kw): canonical)."""
    gluon = mx.gluon
    if isinstance(block, gluon.nn.Conv2DTranspose) and (
        block._kwargs["num_group"] != 1 or any(d != 1 for d in block._kwargs["dilate"])
    ):
        raise ValueError("a grouped or dilated Conv2DTranspose has no canonical layout")
    targets = {"weight": block.weight} | ({"bias": block.bias} if block.bias is not None else {})
    if isinstance(block, gluon.nn.Conv2DTranspose):
        kind = "conv_transpose2d"
    else:
        kind = "conv2d" if isinstance(block, gluon.nn.Conv2D) else "dense"
    return _layer(kind, targets, n)


def _gru(block: Any, n: int) -> list[Any]:
    """GRU: gate blocks already r, z, n (cuDNN's order); a fused bidirectional one split by direction."""
    fused = block._dir == 2
    directions = (("l", "forward"), ("r", "backward")) if fused else (("l", getattr(block, "direction", None)),)
    return [
        _layer("gru", {key: getattr(block, f"{prefix}{i}_{name}") for key, name in RECURRENT}, n, direction)
        for i in range(block._num_layers)
        for prefix, direction in directions
    ]
