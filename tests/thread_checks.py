"""The run's CPU budget reaching each framework's thread pools (tbdkit.env.cpus), checked in a fresh
process of the stack's own Python, in the agent's order: the budget's variables go into the
environment, every workload of the framework is imported (as the agent loads one before its
adapter), then the adapter sets the threads and reads back what the framework uses."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, os
from tbdkit.spec import catalog; from tbdkit.env import cpus
budget = cpus.plan(1, False, 0)
os.environ.update(cpus.thread_env(budget))
for model in catalog.models().values():
    if {fw!r} in model.frameworks:
        catalog.load_module(model, {fw!r})
from tbdkit.adapters import {fw} as adapter
threads = getattr(adapter, "set_threads", None) or adapter.threads_of
print(json.dumps(threads((budget.intra_op, budget.inter_op))))
"""


def threads_after_setting(framework: str) -> dict:
    """What `framework` reports for its threads after the agent set one core's budget."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(fw=framework)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_one_core(framework: str) -> None:
    threads = threads_after_setting(framework)
    assert threads["requested"] == {"intra_op": 1, "inter_op": 1}
    assert "error" not in threads, threads  # set before the framework started its pools
    assert (threads["intra_op"], threads["inter_op"]) == (1, 1), threads
