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

    from tbdkit.describe.canonical import Layer

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

    def fusion(block: Any) -> bool:
        return isinstance(getattr(block, "edge_weights", None), gluon.Parameter)

    def walk(block: Any) -> None:
        if isinstance(block, kinds) or hasattr(block, "tied_to") or fusion(block):
            blocks.append(block)
        for child in block._children.values():
            walk(child)

    walk(model)
    seen: dict[int, tuple[Any, int]] = {}  # insertion order = order of first call

    def positions(block: Any, args: Any, out: Any) -> int:
        if hasattr(block, "tied_to"):
            return int(np.prod(out.shape[:-1]))
        if isinstance(block, gluon.nn.Conv2DTranspose):  # counted at its input (canonical.LAYOUTS)
            return int(args[0].shape[0] * args[0].shape[2] * args[0].shape[3])
        if isinstance(block, gluon.nn.Conv2D):
            return int(
                out.shape[0] * out.shape[2] * out.shape[3]
            )  # every map in the batch (a detector head: one per RoI)
        if isinstance(block, (gluon.nn.Dense, gluon.nn.Embedding)):
            return int(np.prod(out.shape[:-1]))
        if isinstance(block, gluon.rnn.LSTMCell):
            return int(out[0].shape[0])
        if isinstance(block, gluon.rnn.GRU):
            sequence = out[0] if isinstance(out, (list, tuple)) else out
            return int(sequence.shape[0 if block._layout == "TNC" else 1])
        return 0

    def record(block: Any, args: Any, out: Any) -> None:
        seen[id(block)] = (block, seen.get(id(block), (block, 0))[1] + positions(block, args, out))

    handles = [b.register_forward_hook(record) for b in blocks]
    model.hybridize(active=False)  # hooks fire only in imperative mode
    try:
        forward()
    finally:
        for h in handles:
            h.detach()
    layers: list[Any] = []

    def setter(targets: dict[str, Any]) -> Any:
        def assign(arrays: dict[str, np.ndarray]) -> None:
            for key, param in targets.items():
                param.set_data(mx.nd.array(np.reshape(arrays[key], param.shape), dtype=param.dtype))

        return assign

    recurrent = (
        ("w_input", "i2h_weight"),
        ("w_hidden", "h2h_weight"),
        ("b_input", "i2h_bias"),
        ("b_hidden", "h2h_bias"),
    )
    for block, n in seen.values():
        tied: dict[str, tuple[int, ...]] = {}
        if fusion(block):  # one weight per input, element-wise work
            targets, kind, n = {"weights": block.edge_weights}, "fusion", 0
        elif hasattr(block, "tied_to"):
            # with a bias of its own (BERT's decoder) or none (the Transformer's projection)
            targets, kind = ({"bias": block.bias} if getattr(block, "bias", None) is not None else {}), "dense"
            tied = {"weight": tuple(block.tied_to.weight.shape)}
        elif isinstance(block, (gluon.nn.Conv2D, gluon.nn.Conv2DTranspose, gluon.nn.Dense)):
            # Conv2DTranspose's weight is (in, out, kh, kw): already canonical
            if isinstance(block, gluon.nn.Conv2DTranspose) and (
                block._kwargs["num_group"] != 1 or any(d != 1 for d in block._kwargs["dilate"])
            ):
                raise ValueError("a grouped or dilated Conv2DTranspose has no canonical layout")
            targets = {"weight": block.weight} | ({"bias": block.bias} if block.bias is not None else {})
            kind = (
                "conv_transpose2d"
                if isinstance(block, gluon.nn.Conv2DTranspose)
                else "conv2d"
                if isinstance(block, gluon.nn.Conv2D)
                else "dense"
            )
        elif isinstance(block, gluon.nn.BatchNorm):
            # scale=False / center=False keep gamma / beta as fixed state (grad_req 'null'), not parameters
            targets = {k: p for k, p in (("gamma", block.gamma), ("beta", block.beta)) if p.grad_req != "null"}
            kind, n = "batchnorm", 0
        elif isinstance(block, gluon.nn.LayerNorm):
            targets, kind, n = {"gamma": block.gamma, "beta": block.beta}, "layernorm", 0
        elif isinstance(block, gluon.nn.Embedding):
            targets, kind = {"weight": block.weight}, "embedding"
        elif isinstance(block, gluon.rnn.LSTMCell):  # gates i, f, c, o: already canonical
            targets = {key: getattr(block, name) for key, name in recurrent}
            layers.append(
                Layer(
                    "lstm",
                    {k: p.data().asnumpy() for k, p in targets.items()},
                    positions=n,
                    direction=getattr(block, "direction", None),
                    assign=setter(targets),
                )
            )
            continue
        else:  # GRU: gate blocks already r, z, n (cuDNN's order)
            fused = block._dir == 2
            for i in range(block._num_layers):
                for prefix, direction in (
                    (("l", "forward"), ("r", "backward")) if fused else (("l", getattr(block, "direction", None)),)
                ):
                    targets = {key: getattr(block, f"{prefix}{i}_{name}") for key, name in recurrent}
                    layers.append(
                        Layer(
                            "gru",
                            {k: p.data().asnumpy() for k, p in targets.items()},
                            positions=n,
                            direction=direction,
                            assign=setter(targets),
                        )
                    )
            continue
        layers.append(
            Layer(
                kind,
                {k: p.data().asnumpy() for k, p in targets.items()},
                positions=n,
                tied=tied,
                assign=setter(targets),
            )
        )
    for param in model._reg_params.values():
        if param.grad_req != "null" and int(np.prod(param.shape)) == 1:
            layers.append(
                Layer("scale", {"value": param.data().asnumpy().reshape(())}, assign=setter({"value": param}))
            )
    return layers
