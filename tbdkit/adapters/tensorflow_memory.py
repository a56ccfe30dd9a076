"""TensorFlow's half of the memory breakdown (paper Fig. 8), over training steps after the sample
window:

- weights: the bytes of the trainable variables;
- weight gradients: the gradient tensors the optimizers are handed (`optimizer.apply(grads,
  variables)`, which every TF workload calls), read in one step run eagerly
  (`tf.config.run_functions_eagerly`) so they are real tensors: dense gradients count their
  elements, sparse ones (tf.IndexedSlices, e.g. embeddings) their values and indices; a variable
  handed a gradient by several calls (a loss-scale wrapper and its inner optimizer) counts once,
  at its largest;
- feature maps: TensorFlow does not expose what the tape keeps. On a GPU, a second step in graph
  mode (as the run measures) with the allocator's peak reset: peak - memory in use before the step
  - the gradients; that includes library workspaces and transient tensors (an upper bound). On the
  CPU there is no allocator peak: null with the reason;
- workspace: null: TensorFlow's allocator statistics do not separate cuDNN/cuBLAS scratch space;
- dynamic: the optimizers' variables (slots such as momentum, counters).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from tbdkit.analysis.memory import entry

GRADIENT_METHOD = (
    "bytes of the gradient tensors handed to optimizer.apply in one step run eagerly "
    "(tf.config.run_functions_eagerly; IndexedSlices: values + indices; one per variable)"
)
FEATURE_METHOD = (
    "tf.config.experimental.get_memory_info over one graph-mode step with the peak reset: peak - "
    "memory in use before the step - the gradients (includes library workspaces and transient "
    "tensors: an upper bound on what the tape keeps)"
)


def gradient_bytes(grad: Any) -> int:
    """Bytes of one gradient as TensorFlow holds it (0 for None)."""
    if grad is None:
        return 0
    if isinstance(grad, tf.IndexedSlices):
        return gradient_bytes(grad.values) + gradient_bytes(grad.indices)
    return int(tf.size(grad)) * grad.dtype.size


@contextlib.contextmanager
def gradients_handed_over(optimizers: list[Any]) -> Iterator[dict[int, int]]:
    """While on, each optimizer's apply() records, per variable (by id), the largest gradient it
    was handed; the instance attribute shadows the class's method and is removed on exit."""
    seen: dict[int, int] = {}

    def wrap(opt: Any) -> Callable[..., Any]:
        method = type(opt).apply.__get__(opt)

        def apply(grads: Any, trainable_variables: Any = None) -> Any:
            variables = list(trainable_variables) if trainable_variables is not None else [None] * len(list(grads))
            for g, v in zip(grads, variables):
                key = id(v) if v is not None else id(g)
                seen[key] = max(seen.get(key, 0), gradient_bytes(g))
            return method(grads, trainable_variables)

        return apply

    patched = []
    try:
        for opt in optimizers:
            object.__setattr__(opt, "apply", wrap(opt))
            patched.append(opt)
        yield seen
    finally:
        for opt in patched:
            object.__delattr__(opt, "apply")


def optimizers_of(attributes: list[Any]) -> list[Any]:
    """The Keras optimizers among a training state's attributes, and a loss-scale wrapper's inner one."""
    import keras

    out: dict[int, Any] = {}
    for a in attributes:
        if isinstance(a, keras.optimizers.Optimizer):
            out[id(a)] = a
            inner = getattr(a, "inner_optimizer", None)
            if isinstance(inner, keras.optimizers.Optimizer):
                out[id(inner)] = inner
    return list(out.values())


def breakdown(
    weights: int | None,
    attributes: list[Any],
    optimizer_state_bytes: Callable[[], int | None],
    device: str | None,
    step: Callable[[], Any],
) -> dict[str, Any]:
    """The five categories and the peak for memory.json; `device` is TensorFlow's name of the GPU
    ('GPU:0'), None on the CPU."""
    optimizers = optimizers_of(attributes)
    grads: int | None = None
    why_grads = "the workload's training state holds no Keras optimizer whose apply() could be read"
    if optimizers:
        eager = tf.config.functions_run_eagerly()
        tf.config.run_functions_eagerly(True)
        try:
            with gradients_handed_over(optimizers) as seen:
                step()
        finally:
            tf.config.run_functions_eagerly(eager)
        grads = sum(seen.values()) if seen else None
        why_grads = "the step handed no gradients to optimizer.apply"
    state = optimizer_state_bytes()
    fm: int | None = None
    why_fm = (
        "the run is on the CPU: TensorFlow keeps no allocator peak there, and the tensors its tape keeps "
        "for backward are not exposed"
    )
    peak = entry(None, "tf.config.experimental.get_memory_info peak", why_fm)
    if device is not None:
        tf.config.experimental.reset_memory_stats(device)
        before = tf.config.experimental.get_memory_info(device)["current"]
        step()
        top = tf.config.experimental.get_memory_info(device)["peak"]
        peak = entry(
            top,
            "tf.config.experimental.get_memory_info(...)['peak'] over one graph-mode step after the "
            "sample window (reset before it)",
        )
        if grads is None:
            why_fm = "no gradient bytes to take out of the step's peak"
        else:
            fm = max(0, top - before - grads)
    cats = {
        "weights": entry(
            weights,
            "bytes of the trainable variables",
            None if weights is not None else "the model reported no variables",
        ),
        "weight_gradients": entry(grads, GRADIENT_METHOD, None if grads is not None else why_grads),
        "feature_maps": entry(fm, FEATURE_METHOD, None if fm is not None else why_fm),
        "workspace": entry(
            None,
            "cuDNN/cuBLAS workspaces",
            "TensorFlow's allocator statistics do not separate library scratch space"
            + ("; on the GPU it is inside the feature-map figure" if device is not None else ""),
        ),
        "dynamic": entry(
            state,
            "bytes of the optimizers' variables (slots such as momentum, and counters) after the steps",
            None if state is not None else "the workload's training state holds no Keras optimizer",
        ),
    }
    return {"categories": cats, "peak": peak}
