"""Fault injection for the kit's own tests, kept out of the agent: with this folder on PYTHONPATH and
TBDKIT_TEST_KILL_RANK=N in the environment, the worker of rank N dies (exit 3, no summary written) right
after its warm-up stage (tbdkit.agent.run.warm_up), as a worker whose process is killed would. Python
imports this module at start-up (site's sitecustomize); it patches the stage once the agent's module
loads, so processes that never load the agent are untouched."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

AGENT = "tbdkit.agent.run"
RANK = os.environ.get("TBDKIT_TEST_KILL_RANK")


def _patch(module) -> None:
    warm_up = module.warm_up

    def warm_up_then_die(run) -> None:
        warm_up(run)
        if run.worker is not None and str(run.worker.rank) == RANK:
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


if RANK is not None:
    sys.meta_path.insert(0, _AfterAgentLoads())
