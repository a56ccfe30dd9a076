"""`--graph compiled` on MXNet: the workload's hybridized blocks again with
`hybridize(static_alloc=True, static_shape=True)`, where its inputs have fixed shapes.

The standard setting (the workloads' own) is `hybridize(static_alloc=True)`: a cached graph whose
memory is allocated once. static_shape also fixes the shapes of every array in that graph, so MXNet
plans its memory and its operators' workspaces once; a new input shape would re-plan it, so a
workload whose workload.toml declares `input_shapes` other than "fixed" trains as standard and its
record says so. MXNet 1.9 does not count its graph builds: the compile phase steps over every batch
of the pool once (tbdkit.agent.compile_phase).
"""

from __future__ import annotations

from typing import Any

import mxnet as mx

VARIABLE = (
    "input_shapes = {shapes!r} in workload.toml: static_shape would re-plan the graph's memory at every new "
    "shape, so the run trains as standard (hybridize(static_alloc=True))"
)
NOTHING = "the workload hybridizes no block, so there is no graph to fix the shapes of: the run trains as standard"


def hybridized_roots(value: Any) -> list[Any]:
    """The outermost hybridized blocks under `value` (a Block, or a training state holding Blocks):
    hybridize() on them reaches every block inside."""
    if isinstance(value, mx.gluon.HybridBlock) and getattr(value, "_active", False):
        return [value]
    if isinstance(value, mx.gluon.Block):
        return [r for child in value._children.values() for r in hybridized_roots(child)]
    return []


class StaticShapes:
    """The workload's hybridized blocks with static shapes (or why not), and their record."""

    def __init__(self, training: Any, hp: dict[str, Any]) -> None:
        self.blocks: list[str] = []
        self.reason: str | None = None
        shapes = hp.get("input_shapes")
        if shapes != "fixed":
            self.reason = VARIABLE.format(shapes=shapes)
            return
        seen: set[int] = set()
        for name, value in vars(training).items() if hasattr(training, "__dict__") else ():
            for block in hybridized_roots(value):
                if id(block) not in seen:
                    seen.add(id(block))
                    block.hybridize(True, static_alloc=True, static_shape=True)
                    self.blocks.append(f"{name}: {type(block).__name__}")
        if not self.blocks:
            self.reason = NOTHING

    def record(self) -> dict[str, Any]:
        return {
            "graph": "compiled",
            "compiler": "MXNet hybridize(static_alloc=True, static_shape=True)",
            "static_shape": True if self.blocks else None,
            "reason": self.reason,
            "blocks": self.blocks or None,
            "compilations": None,
            "compilations_reason": "MXNet 1.9 does not count its graph builds",
        }
