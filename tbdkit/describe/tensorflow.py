"""TensorFlow's (Keras 3) network in canonical form (tbdkit.describe.canonical): its layers in
forward order, their parameters in the canonical layouts, for `tbdkit describe` and the parity tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np


@contextlib.contextmanager
def building() -> Iterator[None]:
    """While a workload builds its network: a Keras layer with no build() of its own, first called eagerly on
    tensors (or lists of them), creates its sublayers' weights by that eager call (Keras' own fallback where it
    cannot trace the layer) instead of first tracing its call() symbolically in a graph, which for a deep network
    of custom layers costs more than the eager call itself. The same weights come out, created in the same order
    (the order of the calls), with the same names and values. A first call inside a tf.function, or on Keras'
    symbolic inputs, is built as before; so is every layer where Keras lacks these internals."""
    import tensorflow as tf
    from keras.src.layers import layer as keras_layer
    from keras.src.utils import python_utils

    layer_class, unbuilt = keras_layer.Layer, getattr(keras_layer, "might_have_unbuilt_state", None)
    original, is_default = getattr(layer_class, "_maybe_build", None), getattr(python_utils, "is_default", None)
    if original is None or unbuilt is None or is_default is None:
        yield
        return

    def eager(call_spec: Any) -> bool:
        tensors = keras.tree.flatten(list(getattr(call_spec, "tensor_arguments_dict", {}).values()))
        return bool(tensors) and tf.executing_eagerly() and all(keras.ops.is_tensor(t) for t in tensors)

    def maybe_build(self: Any, call_spec: Any) -> None:
        if not self.built and is_default(self.build) and unbuilt(self) and eager(call_spec):
            return  # built by the call itself: each sublayer builds on its own first call
        original(self, call_spec)

    layer_class._maybe_build = maybe_build
    try:
        yield
    finally:
        layer_class._maybe_build = original


def _is_lstm_cell(layer: Any) -> bool:
    """A cell with PyTorch's LSTM parameters (kernel, recurrent_kernel, bias_input, bias_hidden; gates i, f, g, o)."""
    return all(hasattr(layer, a) for a in ("kernel", "recurrent_kernel", "bias_input", "bias_hidden"))


def _is_fusion(layer: Any) -> bool:
    """A layer holding the weights of a weighted sum of its inputs (BiFPN's fast normalized fusion)."""
    return isinstance(getattr(layer, "edge_weights", None), keras.Variable)


def _is_rms_norm(layer: Any) -> bool:
    """An RMSNorm holding one `scale` (keras-hub's LlamaLayerNorm): x / sqrt(mean(x^2) + eps) x scale."""
    return isinstance(getattr(layer, "scale", None), keras.Variable) and hasattr(layer, "epsilon")


def _learned_tensors(layer: Any) -> list[tuple[Any, Any, Any]]:
    """A patch embedding's class token and position table (keras-hub's ViTPatchingAndEmbedding), each as
    (variable, to canonical layout, back): torchvision's (1, 1, dim) and (1, positions, dim)."""
    if not (isinstance(getattr(layer, "class_token", None), keras.Variable) and hasattr(layer, "position_embedding")):
        return []
    table = layer.position_embedding.embeddings
    shape = tuple(table.shape)
    return [
        (layer.class_token, None, None),
        (table, lambda a: np.reshape(a, (1, *a.shape)), lambda a, shape=shape: np.reshape(a, shape)),
    ]


def _einsum_dense(layer: Any) -> dict[str, tuple[Any, Any, Any]]:
    """An EinsumDense (keras-hub's attention projections, Keras' MultiHeadAttention) as a dense layer: its kernel's
    axes that the input shares are the input features, those the output shares the output features, each group
    flattened in order; its bias flattened."""
    lhs, rest = layer.equation.split(",")
    kernel_axes, out = rest.split("->")
    ins, outs = [a for a in kernel_axes if a in lhs], [a for a in kernel_axes if a in out and a not in lhs]
    shape = tuple(layer.kernel.shape)
    order = [kernel_axes.index(a) for a in outs + ins]
    size = {a: shape[kernel_axes.index(a)] for a in kernel_axes}

    def to(a: np.ndarray) -> np.ndarray:
        return np.transpose(a, order).reshape(int(np.prod([size[x] for x in outs])), -1)

    def back(a: np.ndarray) -> np.ndarray:
        return np.transpose(np.reshape(a, [size[x] for x in outs + ins]), np.argsort(order))

    bias_shape = tuple(layer.bias.shape) if getattr(layer, "bias", None) is not None else ()

    def unravel(a: np.ndarray) -> np.ndarray:
        return np.reshape(a, bias_shape)

    canon: dict[str, tuple[Any, Any, Any]] = {"weight": (layer.kernel, to, back)}
    if bias_shape:
        canon["bias"] = (layer.bias, np.ravel, unravel)
    return canon


def _einsum_positions(layer: Any, out: Any) -> int:
    """The output positions of an EinsumDense: its output's size over the axes its kernel does not produce."""
    _, rest = layer.equation.split(",")
    kernel_axes, spec = rest.split("->")
    return int(np.prod([n for a, n in zip(spec, out.shape) if a not in kernel_axes]))


def _positions(layer: Any, out: Any) -> int:
    if isinstance(layer, keras.layers.EinsumDense):
        return _einsum_positions(layer, out)
    if isinstance(layer, (keras.layers.Conv2D, keras.layers.DepthwiseConv2D)):
        return int(out.shape[0] * out.shape[1] * out.shape[2])  # every map in the batch (a detector head: one per RoI)
    if isinstance(layer, (keras.layers.Dense, keras.layers.Embedding)):
        return int(np.prod(out.shape[:-1]))
    if isinstance(layer, keras.layers.GRU):
        sequence = out[0] if isinstance(out, (list, tuple)) else out
        return int(sequence.shape[1])
    if _is_lstm_cell(layer):
        return int(out[0].shape[0])
    if isinstance(layer, keras.layers.RNN):  # wrapping an LSTM cell: its steps, from the output sequence
        return int((out[0] if isinstance(out, (list, tuple)) else out).shape[1])
    return 0


KINDS = (
    keras.layers.Conv2D,
    keras.layers.Conv2DTranspose,
    keras.layers.DepthwiseConv2D,
    keras.layers.BatchNormalization,
    keras.layers.GRU,
    keras.layers.Dense,
    keras.layers.EinsumDense,
    keras.layers.Embedding,
    keras.layers.LayerNormalization,
    keras.layers.GroupNormalization,
)
# canonical name: (variable, to canonical layout, back)
Canon = dict[str, tuple[Any, Any, Any]]


def canonical_layers(model: keras.Model, forward: Any) -> list[Any]:
    """The model's layers in forward order, parameters in tbdkit.describe.canonical's layouts, with the output
    positions each layer's weights were applied at during `forward()` (run eagerly on one sample),
    summed over the layer's calls. A layer with a `tied_to` embedding is a dense layer using that
    embedding's table as its weight (BERT's decoder). Learned scalars held by the model itself come
    last ("scale"), and after them the learned tensors no layer holds (ViT's class token and positions, "tensor").
    A reversible embedding called in reverse (keras-hub's output projection) is a dense layer of its own."""
    from tbdkit.describe.canonical import Layer

    everything = list(model._flatten_layers(include_self=True, recursive=True))
    # position tables used as learned tensors (ViT's) are described with their class tokens, after the layers
    tensors = [x for layer in everything for x in _learned_tensors(layer)]
    as_tensor = {id(layer.position_embedding) for layer in everything if _learned_tensors(layer)}
    # An LSTM cell inside a keras RNN is counted by the RNN's output (the RNN calls it once more
    # than there are steps, to learn its output's shape); a cell called directly, by its calls.
    wrapped = {id(x.cell) for x in everything if isinstance(x, keras.layers.RNN) and _is_lstm_cell(x.cell)}
    in_bidirectional = {id(b.forward_layer) for b in everything if isinstance(b, keras.layers.Bidirectional)}
    seen = _calls([x for x in _sublayers(model, everything, wrapped) if id(x) not in as_tensor], forward)
    layers: list[Any] = []
    for key, (layer, positions) in seen.items():
        if isinstance(layer, keras.layers.RNN) and id(layer.cell) in wrapped:
            layer = layer.cell
        if isinstance(key, tuple):
            layers.append(_reverse_projection(layer, positions))
        else:
            layers.append(_layer_of(layer, positions, id(layer) in in_bidirectional))
    held = {id(w) for layer in everything if layer is not model for w in layer.trainable_weights}
    for w in model.trainable_weights:
        if id(w) not in held and int(np.prod(w.shape)) == 1:
            canon = {"value": (w, lambda a: np.reshape(a, ()), lambda a, shape=tuple(w.shape): np.reshape(a, shape))}
            layers.append(Layer("scale", {"value": np.reshape(w.numpy(), ())}, assign=_setter(canon)))
    for variable, to, back in tensors:
        canon = {"value": (variable, to, back)}
        layers.append(
            Layer("tensor", {"value": to(variable.numpy()) if to else variable.numpy()}, assign=_setter(canon))
        )
    return layers


def _reverse_projection(layer: Any, positions: int) -> Any:
    """A ReversibleEmbedding called in reverse, the output projection: tied to its table, or its own
    (dim, vocabulary) kernel."""
    from tbdkit.describe.canonical import Layer

    canon: Canon
    if layer.tie_weights:
        canon, tied = {}, {"weight": tuple(layer.embeddings.shape)}
    else:
        canon, tied = {"weight": (layer.reverse_embeddings, np.transpose, np.transpose)}, {}
    return Layer("dense", _arrays(canon), positions=positions, tied=tied, assign=_setter(canon))


def _sublayers(model: keras.Model, everything: list[Any], wrapped: set[int]) -> list[Any]:
    """The layers whose calls are counted (an RNN over an LSTM cell counts even when it is the model handed in,
    as a test's lone layer)."""
    return [
        x
        for x in everything
        if (
            (
                x is not model
                and (
                    isinstance(x, KINDS)
                    or _is_rms_norm(x)
                    or hasattr(x, "tied_to")
                    or _is_fusion(x)
                    or (_is_lstm_cell(x) and id(x) not in wrapped)
                )
            )
            or (isinstance(x, keras.layers.RNN) and id(getattr(x, "cell", None)) in wrapped)
        )
    ]


def _calls(sublayers: list[Any], forward: Any) -> dict[Any, tuple[Any, int]]:
    """Each of `sublayers` that `forward()` called, in order of its first call, with its positions summed; a
    ReversibleEmbedding called in reverse (the output projection) is keyed apart, as (id, "reverse")."""
    seen: dict[Any, tuple[Any, int]] = {}  # insertion order = order of first call

    def hook(layer: Any) -> None:
        original = layer.call

        def call(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            if isinstance(layer, keras.layers.Conv2DTranspose):  # counted at its input (canonical.LAYOUTS)
                n = int(np.prod(args[0].shape[:3]))
            else:
                n = int(np.prod(out.shape[:-1])) if hasattr(layer, "tied_to") else _positions(layer, out)
            key: Any = (id(layer), "reverse") if kwargs.get("reverse") or args[1:2] == (True,) else id(layer)
            seen[key] = (layer, seen.get(key, (layer, 0))[1] + n)
            return out

        object.__setattr__(layer, "call", call)

    for layer in sublayers:
        hook(layer)
    try:
        forward()
    finally:
        for layer in sublayers:
            object.__delattr__(layer, "call")
    return seen


def _layer_of(layer: Any, positions: int, in_bidirectional: bool) -> Any:
    """One Keras layer (or LSTM cell) applied at `positions` as a canonical layer."""
    from tbdkit.describe.canonical import Layer, gates_from_canonical, reorder_gates

    if hasattr(layer, "tied_to"):  # with a bias of its own (BERT's decoder) or none (the Transformer's)
        canon: Canon = {"bias": (layer.bias, None, None)} if getattr(layer, "bias", None) is not None else {}
        tied = {"weight": tuple(layer.tied_to.embeddings.shape)}
        return Layer("dense", _arrays(canon), positions=positions, tied=tied, assign=_setter(canon))
    if _is_rms_norm(layer):
        canon = {"gamma": (layer.scale, None, None)}
        return Layer("rmsnorm", {"gamma": layer.scale.numpy()}, assign=_setter(canon))
    if _is_fusion(layer):  # fusion weights (BiFPN's edge_weights): one per input
        canon = {"weights": (layer.edge_weights, None, None)}
        return Layer("fusion", {"weights": layer.edge_weights.numpy()}, assign=_setter(canon))
    weights = _weights(layer)
    if weights is not None:
        kind, canon, weighted = weights
        if kind in ("batchnorm", "layernorm"):
            positions = 0
        if weighted and layer.use_bias:
            canon["bias"] = (layer.bias, None, None)
        return Layer(kind, _arrays(canon), positions=positions, assign=_setter(canon))
    if _is_lstm_cell(layer):
        canon = {
            "w_input": (layer.kernel, np.transpose, np.transpose),
            "w_hidden": (layer.recurrent_kernel, np.transpose, np.transpose),
            "b_input": (layer.bias_input, None, None),
            "b_hidden": (layer.bias_hidden, None, None),
        }
        direction = getattr(layer, "direction", None)
        return Layer("lstm", _arrays(canon), positions=positions, direction=direction, assign=_setter(canon))
    return _canonical_gru(layer, positions, in_bidirectional, Layer, reorder_gates, gates_from_canonical)


def _arrays(canon: Canon) -> dict[str, np.ndarray]:
    return {k: (to(v.numpy()) if to else v.numpy()) for k, (v, to, _) in canon.items()}


def _transposed(kernel: Any) -> Canon:
    """A (kh, kw, in, out) kernel (a transposed convolution's (kh, kw, out, in)) as PyTorch's layout."""
    return {"weight": (kernel, lambda a: np.transpose(a, (3, 2, 0, 1)), lambda a: np.transpose(a, (2, 3, 1, 0)))}


def _weights(layer: Any) -> tuple[str, Canon, bool] | None:
    """A layer's canonical kind, its variables in canonical layouts, and whether it may have a bias of its own;
    None for a recurrent layer or cell."""
    if isinstance(layer, keras.layers.Conv2D):
        return "conv2d", _transposed(layer.kernel), True
    if isinstance(layer, keras.layers.Conv2DTranspose):  # (kh, kw, out, in) -> PyTorch's (in, out, kh, kw)
        return "conv_transpose2d", _transposed(layer.kernel), True
    if isinstance(layer, keras.layers.DepthwiseConv2D):  # PyTorch's grouped conv: (C x M, 1, kh, kw)
        shape = tuple(layer.kernel.shape)
        back = lambda a, shape=shape: _depthwise_from_canonical(a, shape)  # noqa: E731
        return "conv2d", {"weight": (layer.kernel, _depthwise_to_canonical, back)}, True
    if isinstance(layer, keras.layers.BatchNormalization):  # scale/center off: no gamma/beta
        canon = {k: (v, None, None) for k, v in (("gamma", layer.gamma), ("beta", layer.beta)) if v is not None}
        return "batchnorm", canon, False
    if isinstance(layer, (keras.layers.LayerNormalization, keras.layers.GroupNormalization)):
        if isinstance(layer, keras.layers.GroupNormalization) and layer.groups != 1:
            raise ValueError(f"{layer.name}: only GroupNormalization(groups=1), a layer norm, has a canonical layout")
        return "layernorm", {"gamma": (layer.gamma, None, None), "beta": (layer.beta, None, None)}, False
    if isinstance(layer, keras.layers.EinsumDense):  # its bias, if any, comes with it
        return "dense", _einsum_dense(layer), False
    if isinstance(layer, keras.layers.Dense):
        return "dense", {"weight": (layer.kernel, np.transpose, np.transpose)}, True
    if isinstance(layer, keras.layers.Embedding):
        return "embedding", {"weight": (layer.embeddings, None, None)}, False
    return None


def _depthwise_to_canonical(kernel: np.ndarray) -> np.ndarray:
    """A depthwise kernel (kh, kw, C, M) as PyTorch's Conv2d(groups=C) weight (C x M, 1, kh, kw)."""
    kh, kw, c, m = kernel.shape
    return np.transpose(kernel, (2, 3, 0, 1)).reshape(c * m, 1, kh, kw)


def _depthwise_from_canonical(weight: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    kh, kw, c, m = shape
    return np.transpose(np.reshape(weight, (c, m, kh, kw)), (2, 3, 0, 1))


def _setter(canon: dict[str, tuple[Any, Any, Any]]) -> Any:
    """Assigns canonical arrays to Keras variables, each through its inverse layout change."""

    def assign(arrays: dict[str, np.ndarray]) -> None:
        for key, (variable, _, back) in canon.items():
            variable.assign(back(arrays[key]) if back else arrays[key])

    return assign


def _canonical_gru(layer: Any, steps: int, in_bidirectional: bool, Layer: Any, reorder: Any, unorder: Any) -> Any:
    cell = layer.cell
    if not cell.reset_after:
        raise ValueError(
            f"{layer.name}: a GRU with reset_after=False is a different network from "
            "PyTorch's and cuDNN's; build it with reset_after=True"
        )
    direction = "backward" if layer.go_backwards else "forward" if in_bidirectional else None
    bias = cell.bias.numpy()
    params = {
        "w_input": reorder(cell.kernel.numpy().T, "zrn"),
        "w_hidden": reorder(cell.recurrent_kernel.numpy().T, "zrn"),
        "b_input": reorder(bias[0], "zrn"),
        "b_hidden": reorder(bias[1], "zrn"),
    }

    def assign(arrays: dict[str, np.ndarray]) -> None:
        cell.kernel.assign(unorder(arrays["w_input"], "zrn").T)
        cell.recurrent_kernel.assign(unorder(arrays["w_hidden"], "zrn").T)
        cell.bias.assign(np.stack([unorder(arrays["b_input"], "zrn"), unorder(arrays["b_hidden"], "zrn")]))

    return Layer("gru", params, positions=steps, direction=direction, assign=assign)
