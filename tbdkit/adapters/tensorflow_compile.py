"""`--graph compiled` on TensorFlow: the workload's compiled step (its `tf.function`s, found on its
training state) again as `tf.function(jit_compile=True)`, XLA compiling each whole.

- A workload whose step is no tf.function (it runs eagerly: Faster and Mask R-CNN, whose proposals
  and RoI sampling have data-dependent shapes) gives XLA nothing to compile: the run trains as
  standard and its record says why (`xla: null` with the reason).
- A step XLA refuses at its first call (an operation without an XLA kernel, a shape XLA cannot
  bound) is put back as it was, the step rerun standard, and the record says why. XLA compiles before
  it runs anything, so the refused call changed no variable.
- Counting: XLA keeps one executable per concrete input shapes of a jit-compiled function (its
  compilation cache keys on them, whatever the tf.function's input signature leaves open), so each
  distinct set of argument shapes and dtypes a compiled function is called with is one compilation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

NO_FUNCTION = (
    "the workload's train step is no tf.function (it runs eagerly, its shapes data-dependent), so XLA has "
    "no graph to compile: the run trains as standard"
)
DISTRIBUTED = (
    "XLA under a tf.distribute strategy is not built in this kit (its all-reduce would have to compile "
    "with the step): the run trains as standard"
)


def is_function(value: Any) -> bool:
    """A tf.function (TensorFlow's polymorphic function: python_function and input_signature)."""
    return isinstance(value, tf.types.experimental.PolymorphicFunction) and hasattr(value, "python_function")


def signature(args: Any) -> tuple[tuple[tuple[int | None, ...], str], ...]:
    """The shapes and dtypes of a call's tensor arguments: what XLA's compilation cache keys on."""
    return tuple(
        (tuple(a.shape.as_list()), a.dtype.name)
        for a in tf.nest.flatten(args)
        if isinstance(a, (tf.Tensor, tf.Variable))
    )


class Jitted:
    """One of the workload's tf.functions under XLA, counting the input shapes it compiles for."""

    def __init__(self, function: Any, seen: set[Any], name: str) -> None:
        self.standard = function
        self.python_function = function.python_function
        self.input_signature = function.input_signature
        self.jit = tf.function(function.python_function, input_signature=function.input_signature, jit_compile=True)
        self.seen, self.name = seen, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.seen.add((self.name, signature((args, kwargs))))
        return self.jit(*args, **kwargs)


def is_xla_refusal(exc: BaseException) -> bool:
    """An error XLA raises when it cannot compile a function (before running any of it)."""
    if not isinstance(exc, (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.InternalError)):
        return False
    text = str(exc)
    return any(k in text for k in ("XLA", "xla", "jit_compile", "must be a compile-time constant", "JIT"))


class XlaStep:
    """The workload's tf.functions under XLA on its training state (or why not), and their record."""

    def __init__(self, training: Any, distributed: bool = False) -> None:
        self.training = training
        self.seen: set[Any] = set()
        self.functions: dict[str, Jitted] = {}
        self.reason: str | None = None
        self.refused = False
        if distributed:
            self.reason = DISTRIBUTED
            return
        found = {k: v for k, v in vars(training).items() if is_function(v)} if hasattr(training, "__dict__") else {}
        if not found:
            self.reason = NO_FUNCTION
            return
        for name, function in found.items():
            self.functions[name] = Jitted(function, self.seen, name)
            setattr(training, name, self.functions[name])

    @property
    def active(self) -> bool:
        return bool(self.functions) and not self.refused

    def run(self, step: Callable[[], Any]) -> Any:
        """`step()` under XLA; a step XLA refuses is put back as it was (standard) and run again."""
        if not self.active:
            return step()
        try:
            return step()
        except Exception as exc:
            if not is_xla_refusal(exc):
                raise
            self.refused = True
            for name, jitted in self.functions.items():
                setattr(self.training, name, jitted.standard)
            first = str(exc).strip().splitlines()[0][:300]
            self.reason = f"XLA could not compile the step ({type(exc).__name__}: {first}): the run trains as standard"
            return step()

    def compilations(self) -> int | None:
        return len(self.seen) if self.functions else None

    def config(self) -> dict[str, Any]:
        return {
            "graph": "compiled",
            "compiler": "XLA: tf.function(jit_compile=True) over the workload's compiled step",
            "xla": True if self.active else None,
            "reason": self.reason,
            "functions": sorted(self.functions) or None,
        }

    def record(self) -> dict[str, Any]:
        return {
            **self.config(),
            "compilations": self.compilations(),
            "method": "one XLA compilation per distinct set of argument shapes and dtypes a jit-compiled function "
            "was called with (XLA's compilation cache keys on them)",
        }
