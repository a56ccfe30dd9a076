"""The launchers a RunSpec may name, what each can run (TRAITS), and the `auto` rule.

How a launcher starts the agent lives in tbdkit/launch/ (its one registry, LAUNCHERS: a class per row of TRAITS);
what a spec may ask of a launcher (several worker processes, several nodes on this machine, a shaped link,
several replicas in one process) is read from here: by the spec's own validation, by the CPU budget the
launcher and the agent give each worker, and by the planner of `tbdkit bench` and `tbdkit sweep`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Name = Literal["native", "docker", "netns", "slurm"]  # netns: several "machines" as network namespaces here
AUTO = "auto"


@dataclass(frozen=True)
class Traits:
    name: str
    several_workers: bool  # a job of more than one worker process
    nodes_here: bool  # several nodes, all on this machine (each one a network namespace)
    shapes_links: bool  # each node's link shaped to a rate (tc)
    one_process: bool  # several replicas trained in one process on this machine
    elsewhere: bool = False  # the job runs on a scheduler's machines (Slurm), not on this one's cores


TRAITS: dict[str, Traits] = {
    "native": Traits("native", several_workers=True, nodes_here=False, shapes_links=False, one_process=True),
    "docker": Traits("docker", several_workers=False, nodes_here=False, shapes_links=False, one_process=False),
    "netns": Traits("netns", several_workers=True, nodes_here=True, shapes_links=True, one_process=False),
    "slurm": Traits(
        "slurm", several_workers=True, nodes_here=False, shapes_links=False, one_process=False, elsewhere=True
    ),
}


def resolve(name: str, nodes: int = 1) -> str:
    """The launcher `--launcher name` means: for `auto`, netns for several nodes (they are network namespaces
    of this machine), else native; any other name as given (the spec's validation refuses an unknown one)."""
    if name != AUTO:
        return name
    return "netns" if nodes > 1 else "native"


def workers_here(processes: int, processes_per_node: int, launcher: str) -> int:
    """How many of a job's worker processes share this machine's cores: all of them where the launcher puts
    every node on this machine (netns), a node's workers otherwise, 1 for a single run (also one process
    training several replicas, --one-process)."""
    if processes <= 1:
        return 1
    traits = TRAITS.get(launcher)
    return processes if traits is not None and traits.nodes_here else processes_per_node
