"""`--graph compiled` on PyTorch: torch.compile of the workload's whole train step (TorchDynamo
captures it, inductor compiles it, default mode), and what the compiler did, counted.

- Shapes: a workload whose workload.toml declares `input_shapes = "variable"` (each batch padded to
  its longest sample: Deep Speech 2, Seq2Seq, Transformer, Faster and Mask R-CNN) is compiled with
  dynamic shapes (`dynamic=True`: one graph whatever the lengths, its sizes symbolic); fixed and
  bucketed shapes are compiled static (`dynamic=False`: one specialized graph per shape, a bucketed
  model's buckets each compiled once in the compile phase).
- Counting: every compilation TorchDynamo starts and ends is seen through its compile callbacks
  (torch._dynamo.callback.on_compile_start / on_compile_end, registered after torch._dynamo.reset(),
  which drops them; a compile id "frame/attempt" with attempt > 0 is a recompilation of a frame
  already compiled); graph breaks through
  torch._dynamo.utils.counters["graph_break"] (the reason of each, counted).
- Caches: inductor and Triton write their compiled artifacts under a folder of this process's own
  (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR), removed when it exits: a run never reuses another
  run's compilation, so its compile time is a cold compile's. With `--compile-cache shared` they go
  to one folder kept across runs (TBDKIT_COMPILE_CACHE_DIR, default ~/.cache/tbdkit/torch-compile):
  a run after one that compiled the same graphs measures the warm cost.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

BACKEND = "inductor"
MODE = "default"
_ATTEMPT = re.compile(r"(\d+)/(\d+)")


def dynamic_shapes(hp: dict[str, Any]) -> tuple[bool, str]:
    """Whether the step is compiled with dynamic shapes, from workload.toml's `input_shapes`, and why."""
    shapes = hp.get("input_shapes")
    if shapes == "variable":
        return True, (
            "input_shapes = 'variable' in workload.toml: dynamic=True, one graph for every padded length "
            "(its sizes symbolic), never a recompilation per shape"
        )
    return False, (
        f"input_shapes = {shapes!r} in workload.toml: dynamic=False, a graph specialized to each shape "
        "(compiled once per shape in the compile phase)"
    )


class Events:
    """TorchDynamo's compilations in this process, from its compile callbacks (registered once)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = 0
        self.recompilations = 0
        self.seconds = 0.0
        self.open: dict[str, float] = {}

    def start(self, args: Any) -> None:
        with self.lock:
            self.started += 1
            found = _ATTEMPT.search(str(args.compile_id))
            if found and int(found.group(2)) > 0 and args.callback_trigger.name == "DYNAMO":
                self.recompilations += 1
            self.open[f"{args.callback_trigger.name} {args.compile_id}"] = time.perf_counter()

    def end(self, args: Any) -> None:
        with self.lock:
            began = self.open.pop(f"{args.callback_trigger.name} {args.compile_id}", None)
            if began is not None:
                self.seconds += time.perf_counter() - began

    def snapshot(self) -> tuple[int, int, float]:
        with self.lock:
            return self.started, self.recompilations, self.seconds


def listen() -> Events:
    """Compile events from now on: callbacks registered with TorchDynamo (torch._dynamo.reset() drops
    every registered callback, so each compiled step registers its own after resetting)."""
    from torch._dynamo.callback import on_compile_end, on_compile_start

    events = Events()
    on_compile_start(events.start)
    on_compile_end(events.end)
    return events


_CACHE: str | None = None


def private_cache() -> str:
    """A cache folder for inductor and Triton that only this process uses, removed at its exit."""
    global _CACHE
    if _CACHE is None:
        _CACHE = tempfile.mkdtemp(prefix="tbdkit-torchinductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE
        os.environ["TRITON_CACHE_DIR"] = os.path.join(_CACHE, "triton")
        atexit.register(shutil.rmtree, _CACHE, True)
    return _CACHE


def shared_cache() -> str:
    """The cache folder kept across runs (`--compile-cache shared`): TBDKIT_COMPILE_CACHE_DIR, else
    ~/.cache/tbdkit/torch-compile."""
    global _CACHE
    if _CACHE is None:
        default = os.path.join(os.path.expanduser("~"), ".cache", "tbdkit", "torch-compile")
        _CACHE = os.environ.get("TBDKIT_COMPILE_CACHE_DIR") or default
        os.makedirs(_CACHE, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE
        os.environ["TRITON_CACHE_DIR"] = os.path.join(_CACHE, "triton")
    return _CACHE


def graph_breaks() -> Counter[str]:
    """Graph breaks so far in this process by reason (the first line of TorchDynamo's message)."""
    from torch._dynamo.utils import counters

    out: Counter[str] = Counter()
    for reason, n in counters["graph_break"].items():
        out[str(reason).strip().splitlines()[0][:160]] += int(n)
    return out


class CompiledStep:
    """The workload's train step under torch.compile, and its compiler's record since it was made."""

    def __init__(
        self, train_step: Callable[..., Any], hp: dict[str, Any], backend: str = BACKEND, cache: str = "private"
    ) -> None:
        self.backend = backend
        self.shared = cache == "shared"
        self.cache = shared_cache() if self.shared else private_cache()
        torch._dynamo.reset()  # no graph of an earlier step of this process is reused or counted against its limits
        self.dynamic, self.shapes_reason = dynamic_shapes(hp)
        self.events = listen()
        self._breaks = graph_breaks()
        self.step = torch.compile(train_step, backend=backend, dynamic=self.dynamic)

    def compilations(self) -> int:
        """Compilations TorchDynamo has started for this step (first compilations and recompilations)."""
        return self.events.snapshot()[0]

    def config(self) -> dict[str, Any]:
        """How the step is compiled (env.json)."""
        return {
            "graph": "compiled",
            "compiler": f"torch.compile (TorchDynamo + {self.backend}, mode {MODE})",
            "backend": self.backend,
            "mode": MODE,
            "dynamic": self.dynamic,
            "shapes": self.shapes_reason,
            "cache": (
                f"{self.cache}, kept across runs (--compile-cache shared): a warm compile where an earlier run "
                "compiled the same graphs"
                if self.shared
                else "a folder of this process's own (TORCHINDUCTOR_CACHE_DIR), removed at its exit: a cold compile"
            ),
        }

    def record(self) -> dict[str, Any]:
        """How the step is compiled and what the compiler has done so far (summary.json)."""
        started, recompiled, seconds = self.events.snapshot()
        breaks = graph_breaks() - self._breaks
        return {
            **self.config(),
            "compilations": started,
            "recompilations": recompiled,
            "graph_breaks": sum(breaks.values()),
            "graph_break_reasons": dict(breaks.most_common()),
            "dynamo_compile_s": round(seconds, 3),
            "method": "torch._dynamo.callback on_compile_start/on_compile_end (a compile id 'frame/attempt' with "
            "attempt > 0 is a recompilation; dynamo_compile_s sums start-to-end times); "
            "torch._dynamo.utils.counters['graph_break']",
        }
