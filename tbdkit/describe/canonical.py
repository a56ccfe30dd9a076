"""A framework-neutral description of a network: its layers in a canonical layout, and FLOPs.

Each framework stores the same layer differently (Keras keeps a convolution's kernel as
(kh, kw, in, out) and a GRU's gates in the order z, r, h; PyTorch keeps (out, in, kh, kw) and
r, z, n). The adapters convert their framework's parameters to the layouts below, in the order
the layers run in a forward pass, and report for each layer the number of output positions its
weights were applied at for one sample (found by running the framework's own forward pass). The
FLOP count is then defined once, here, from those shapes and positions.

FLOP convention (that of torch.utils.flop_counter and most papers): 2 FLOPs per multiply-
accumulate of convolutions, dense layers and recurrent matrix products; element-wise work
(batch norm, layer norm, activations, GRU and LSTM gate arithmetic, softmax, the loss) and
embedding lookups are not counted. Products of two activations that hold no weights (attention's
Q K^T and weighted sum of V: 4 x seq_len^2 x hidden per sequence and layer) are not counted
either: the count follows the layers that hold parameters. A layer applied many times (an LSTM
cell or attention projection inside a decoder loop) is one layer whose positions add up over its
calls. A training step is counted as 3x the forward pass (the backward pass computes gradients
with respect to both the inputs and the weights, each costing about one forward pass).

Only stdlib and NumPy: this module runs in every stack's environment and on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The canonical layout of each layer kind's trainable parameters.
LAYOUTS: dict[str, dict[str, str]] = {
    "conv2d": {"weight": "(out_channels, in_channels, kernel_h, kernel_w)", "bias": "(out_channels,)"},
    # a transposed convolution (PyTorch's ConvTranspose2d, Keras' Conv2DTranspose), positions counted at
    # its input: each input position multiplies every weight once (torch.utils.flop_counter's rule)
    "conv_transpose2d": {"weight": "(in_channels, out_channels, kernel_h, kernel_w)", "bias": "(out_channels,)"},
    "batchnorm": {"gamma": "(channels,)", "beta": "(channels,)"},
    # one kind for two layers: a LayerNorm over the last axis (dim), and GroupNorm(1, C) (Keras'
    # GroupNormalization(groups=1)), which normalizes each sample over all of (C, H, W), then scales
    # and shifts per channel
    "layernorm": {
        "gamma": "(dim,) or (channels,) for GroupNorm(1, C)",
        "beta": "(dim,) or (channels,) for GroupNorm(1, C)",
    },
    # RMSNorm (Llama's): x / sqrt(mean(x^2) + eps) x gamma, over the last axis, no shift
    "rmsnorm": {"gamma": "(dim,)"},
    "dense": {"weight": "(out_features, in_features)", "bias": "(out_features,)"},
    "gru": {  # one direction of one layer; gate blocks in the order reset, update, new (PyTorch's, cuDNN's)
        "w_input": "(3*hidden, input)",
        "w_hidden": "(3*hidden, hidden)",
        "b_input": "(3*hidden,)",
        "b_hidden": "(3*hidden,)",
    },
    "lstm": {  # one direction of one layer, or one cell; gate blocks i, f, g, o (PyTorch's; Keras' and MXNet's i, f, c, o)
        "w_input": "(4*hidden, input)",
        "w_hidden": "(4*hidden, hidden)",
        "b_input": "(4*hidden,)",
        "b_hidden": "(4*hidden,)",
    },
    "embedding": {"weight": "(vocabulary, dim)"},
    "scale": {"value": "()"},  # a learned scalar (e.g. the g of scaled Luong attention)
    # learned weights of a weighted sum of same-shaped inputs, one per input (BiFPN's fast normalized
    # fusion: sum_i relu(w_i) x_i / (sum_i relu(w_i) + eps)); element-wise work, no FLOPs counted
    "fusion": {"weights": "(inputs,)"},
    # a learned tensor the network adds or concatenates as it is (ViT's class token (1, 1, dim) and position
    # embeddings (1, positions, dim)), held by no layer of the kinds above: the model's own shape, no FLOPs
    "tensor": {"value": "(1, ..., dim)"},
}
GATES = ("r", "z", "n")
TRAINING_FLOPS_PER_FORWARD = 3


@dataclass
class Layer:
    """One layer in canonical form: its kind, parameters (canonical layout) and output positions per sample."""

    kind: str
    params: dict[str, np.ndarray]
    positions: int = 0
    direction: str | None = None  # "forward" / "backward" for one direction of a recurrent layer
    name: str = field(default="")
    # shapes of parameters this layer uses but an earlier layer owns (a decoder tied to an embedding)
    tied: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # writes canonical arrays of this layer's parameters back into the framework's model
    assign: Callable[[dict[str, np.ndarray]], None] | None = field(default=None, repr=False)

    def shapes(self) -> dict[str, list[int]]:
        return {k: list(v.shape) for k, v in self.params.items()}

    def flops(self) -> int:
        """Forward FLOPs for one sample (2 per multiply-accumulate)."""
        p = self.params
        if self.kind in ("conv2d", "conv_transpose2d", "dense"):
            weight = int(p["weight"].size) if "weight" in p else int(np.prod(self.tied["weight"]))
            return 2 * weight * self.positions
        if self.kind in ("gru", "lstm"):
            return 2 * (int(p["w_input"].size) + int(p["w_hidden"].size)) * self.positions
        if self.kind in (
            "batchnorm",
            "layernorm",
            "rmsnorm",
            "embedding",
            "scale",
            "fusion",
            "tensor",
        ):  # lookups and element-wise work
            return 0
        raise ValueError(f"no FLOP rule for layer kind {self.kind!r}")


def reorder_gates(a: np.ndarray, order: str, axis: int = 0) -> np.ndarray:
    """Gate blocks stacked along `axis` in `order` (e.g. "zrn" for Keras) -> canonical r, z, n."""
    blocks = np.split(np.asarray(a), 3, axis=axis)
    by_gate = dict(zip(order, blocks))
    return np.concatenate([by_gate[g] for g in GATES], axis=axis)


def gates_from_canonical(a: np.ndarray, order: str, axis: int = 0) -> np.ndarray:
    """Canonical r, z, n gate blocks along `axis` -> the framework's `order` (the inverse of reorder_gates)."""
    by_gate = dict(zip(GATES, np.split(np.asarray(a), 3, axis=axis)))
    return np.concatenate([by_gate[g] for g in order], axis=axis)


def name_layers(layers: Sequence[Layer]) -> list[Layer]:
    """Canonical names: kind + 1-based ordinal in forward order (conv1, bn1, gru1.forward, dense1, ...)."""
    counts: dict[str, int] = {}
    short = {
        "conv2d": "conv",
        "conv_transpose2d": "deconv",
        "batchnorm": "bn",
        "dense": "dense",
        "gru": "gru",
        "lstm": "lstm",
        "embedding": "embedding",
        "scale": "scale",
        "layernorm": "ln",
        "rmsnorm": "rms",
    }
    for layer in layers:
        if layer.direction == "backward":
            n = counts[layer.kind]
        else:
            n = counts[layer.kind] = counts.get(layer.kind, 0) + 1
        layer.name = f"{short.get(layer.kind, layer.kind)}{n}" + (f".{layer.direction}" if layer.direction else "")
    return list(layers)


def report(layers: Sequence[Layer], reference: dict[str, Any]) -> dict[str, Any]:
    """What `tbdkit describe` prints: parameter count, per-layer shapes in order, FLOPs per sample."""
    named = name_layers(layers)
    forward = sum(layer.flops() for layer in named)
    return {
        "parameters": sum(int(a.size) for layer in named for a in layer.params.values()),
        "layers": [
            {
                "name": layer.name,
                "kind": layer.kind,
                "params": layer.shapes(),
                "positions_per_sample": layer.positions,
                "forward_flops": layer.flops(),
                **({"tied": {k: list(v) for k, v in layer.tied.items()}} if layer.tied else {}),
            }
            for layer in named
        ],
        "flops_per_sample": {
            "forward": forward,
            "training": TRAINING_FLOPS_PER_FORWARD * forward,
            "unit": "FLOP",
            "reference_sample": reference,
            "convention": (
                "2 FLOPs per multiply-accumulate of convolutions, dense layers and recurrent matrix "
                "products, at the output positions the framework's forward pass produced for the "
                "reference sample; element-wise work, embedding lookups and attention's activation-by-activation "
                "products not counted; training = 3 x forward"
            ),
        },
        "layouts": {k: v for k, v in LAYOUTS.items() if any(layer.kind == k for layer in named)},
    }


def reference_gru(x: np.ndarray, p: dict[str, np.ndarray], h0: np.ndarray | None = None) -> np.ndarray:
    """A GRU direction in canonical layout over x (T, N, In), reset gate applied after the hidden
    product (PyTorch, cuDNN, Keras reset_after=True, MXNet): the ground truth for gate-order tests."""

    def sigmoid(v: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-v))

    hidden = p["w_hidden"].shape[1]
    h = np.zeros((x.shape[1], hidden)) if h0 is None else h0
    out = []
    for xt in x:
        gi = xt @ p["w_input"].T + p["b_input"]
        gh = h @ p["w_hidden"].T + p["b_hidden"]
        r = sigmoid(gi[:, :hidden] + gh[:, :hidden])
        z = sigmoid(gi[:, hidden : 2 * hidden] + gh[:, hidden : 2 * hidden])
        n = np.tanh(gi[:, 2 * hidden :] + r * gh[:, 2 * hidden :])
        h = (1 - z) * n + z * h
        out.append(h)
    return np.stack(out)


def reference_lstm(
    x: np.ndarray, p: dict[str, np.ndarray], state: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An LSTM direction in canonical layout (gates i, f, g, o; input and hidden biases) over x
    (T, N, In): outputs (T, N, H) and the final h and c. The ground truth for gate-order tests."""

    def sigmoid(v: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-v))

    hidden = p["w_hidden"].shape[1]
    h, c = state if state is not None else (np.zeros((x.shape[1], hidden)), np.zeros((x.shape[1], hidden)))
    out = []
    for xt in x:
        z = xt @ p["w_input"].T + p["b_input"] + h @ p["w_hidden"].T + p["b_hidden"]
        i, f, g, o = np.split(z, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.stack(out), h, c
