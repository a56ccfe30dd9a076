"""Fault injection for the kit's own tests, kept out of the agent: with this folder on PYTHONPATH and
TBDKIT_TEST_KILL_RANK=N in the environment, the worker of rank N dies (exit 3, no summary written) right
after its warm-up stage (tbdkit.agent.run.warm_up), as a worker whose process is killed would (killed by
signal S itself where TBDKIT_TEST_KILL_SIGNAL=S, the OOM killer's KILL, say); with
TBDKIT_TEST_STEP_SLEEP_S=S, every training step from the warm-up on takes S seconds more, so a run of the
machinery check's stack (a step well under a millisecond) is still in warm-up when a test interrupts it,
passes a time limit or loses a node (min_warmup_iterations steps at least). Python
imports this module at start-up (site's sitecustomize); it patches the stage once the agent's module
loads, so processes that never load the agent are untouched."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import signal
import sys
import time

AGENT = "tbdkit.agent.run"
RANK = os.environ.get("TBDKIT_TEST_KILL_RANK")
STEP_SLEEP_S = os.environ.get("TBDKIT_TEST_STEP_SLEEP_S")
KILL_SIGNAL = os.environ.get("TBDKIT_TEST_KILL_SIGNAL")


def _slowed(step, seconds: float):
    def slow_step(*args, **kwargs):
        time.sleep(seconds)
        return step(*args, **kwargs)

    return slow_step


def _patch(module) -> None:
    warm_up = module.warm_up

    def warm_up_then_die(run) -> None:
        if STEP_SLEEP_S is not None:
            run.loop.adapter.step = _slowed(run.loop.adapter.step, float(STEP_SLEEP_S))
        warm_up(run)
        if run.worker is not None and str(run.worker.rank) == RANK:
            if KILL_SIGNAL:
                os.kill(os.getpid(), signal.Signals[f"SIG{KILL_SIGNAL}"])
            os._exit(3)

    module.warm_up = warm_up_then_die


class _AfterAgentLoads(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != AGENT:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module) -> None:
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


if RANK is not None or STEP_SLEEP_S is not None:
    sys.meta_path.insert(0, _AfterAgentLoads())
