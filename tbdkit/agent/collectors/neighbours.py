"""Foreign CPU load during the sample window: what other processes ran on the run's cores (the warm-up's
too, read at its two ends only: tbdkit.agent.loop).

Foreign CPU time = the process time of the run's cores (psutil.cpu_times(percpu=True): user + nice +
system, the time the kernel charges to some process) minus the CPU time of the run's own process
tree (the agent, every descendant it has or had in the window, and the children it reaped),
read at the window's start and end and at every sampler tick (so a child that ends inside the
window still counts as the run's). Divided by the window's wall time it is in core-equivalents:
1.0 is one core kept busy by someone else for the whole window.

Interrupt time (irq + softirq) is left out of it and reported beside it (`interrupt_cores`): the
kernel charges it to no process, so it cannot be split between the run and its neighbours, and a
data-parallel run's own traffic makes a lot of it (MXNet's dist_sync pushing ResNet-50's gradients
over a shaped veth link spent 0.4 of a core in softirq on this project's 2-core machine, which
counted as foreign would have called every such run disturbed).

The run's process tree grows from the kit's launcher (`tbdkit bench`, a sweep: its pid comes in
TBDKIT_LAUNCHER_PID) when that process is an ancestor of the agent: so the workers of a
data-parallel job (torchrun's, every netns node's) and the launcher's own progress display are
the run's, not neighbours. Elsewhere (a container, an agent started by hand) it grows from the agent,
and so it does from the moment the launcher is gone (killed while the run goes on to its stop): the
launcher's CPU time until then stays the run's.

The run's cores are its pinned cores (--pin), else every core of its affinity mask; load on cores
the run may not use is not counted.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psutil

from tbdkit.core.metric import metric, missing


def method(span: str) -> str:
    """How the foreign load over `span` (the sample window, the warm-up) is measured."""
    return (
        "process CPU time of the run's cores (psutil.cpu_times(percpu=True) deltas: user+nice+system; irq+softirq "
        f"are charged to no process and reported apart as interrupt_cores) minus the CPU time of the run's own "
        f"process tree, over {span}, / its wall time"
    )


WINDOW = "the sample window"


LAUNCHER_PID = "TBDKIT_LAUNCHER_PID"  # set by the launcher in the agent's environment (tbdkit.env.stacks.agent_env)


def run_root() -> psutil.Process:
    """The process the run's tree grows from: the launcher, where it is this process's ancestor, else this process."""
    me = psutil.Process()
    pid = os.environ.get(LAUNCHER_PID, "")
    if pid.isdigit():
        try:
            if int(pid) in {p.pid for p in me.parents()}:
                return psutil.Process(int(pid))
        except psutil.Error:
            pass
    return me


def tree(root: psutil.Process) -> list[psutil.Process]:
    """`root` and every descendant it has now."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return [root]


PROCESS_FIELDS = ("user", "nice", "system")  # time the kernel charges to a process
INTERRUPT_FIELDS = ("irq", "softirq")  # time it charges to none


def _sum(times: Any, fields: tuple[str, ...]) -> float:
    return float(sum(getattr(times, f, 0.0) for f in fields))


class NeighbourCollector:
    name = "neighbours"

    def __init__(self, cores: list[int] | None = None, span: str = WINDOW) -> None:
        self.span = span  # what start() to stop() covers, in the method's words
        self.proc = run_root()
        self.launcher_gone: int | None = None  # the launcher's pid, once the tree grows from the agent instead
        self.cores = cores if cores is not None else sorted(psutil.Process().cpu_affinity() or [])
        self.first: dict[int, float] = {}  # pid -> its CPU seconds when first seen in the window
        self.last: dict[int, float] = {}  # pid -> its CPU seconds when last seen
        self.series: list[float] = []  # foreign core-equivalents per sampler tick
        self._baseline = False

    def _core_seconds(self) -> tuple[float, float]:
        """(process, interrupt) CPU seconds of the run's cores so far, from one read."""
        per = psutil.cpu_times(percpu=True)
        mine = [per[i] for i in self.cores if i < len(per)]
        return sum(_sum(t, PROCESS_FIELDS) for t in mine), sum(_sum(t, INTERRUPT_FIELDS) for t in mine)

    def _root_times(self) -> Any:
        """The root's CPU times; once the launcher is gone (ended, or a zombie its parent has not reaped: either
        way the agent is no longer in its tree), the agent's, as the root from then on."""
        if self.proc.pid != os.getpid():
            try:
                if self.proc.status() != psutil.STATUS_ZOMBIE:
                    return self.proc.cpu_times()
            except psutil.NoSuchProcess:
                pass
            me = psutil.Process()
            self.launcher_gone, self.proc = self.proc.pid, me
            t = me.cpu_times()
            if me.pid in self.first:  # seen as the launcher's child, without the children it reaped: so it goes on
                self.first[me.pid] += t.children_user + t.children_system
            return t
        return self.proc.cpu_times()

    def _own(self) -> None:
        """Note the CPU seconds of every process of the run's tree now (the agent's includes its reaped children)."""
        t = self._root_times()
        now = {self.proc.pid: t.user + t.system + t.children_user + t.children_system}
        for child in tree(self.proc)[1:]:
            try:
                ct = child.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            now[child.pid] = ct.user + ct.system
        for pid, seconds in now.items():
            # a process first seen inside the window started inside it: all its time is the run's
            self.first.setdefault(pid, seconds if self._baseline else 0.0)
            self.last[pid] = seconds

    def _own_seconds(self) -> float:
        return sum(self.last[p] - self.first[p] for p in self.last)

    def start(self) -> None:
        self.first.clear()
        self.last.clear()
        self.series.clear()
        self._baseline = True
        self._own()
        self._baseline = False
        self.busy0, self.interrupts0 = self._core_seconds()
        self.busy_tick = self.busy0
        self.wall0 = self.wall_tick = time.perf_counter()
        self.own_tick = 0.0

    def sample(self) -> dict[str, Any]:
        self._own()
        busy, wall, own = self._core_seconds()[0], time.perf_counter(), self._own_seconds()
        foreign = max(0.0, (busy - self.busy_tick) - (own - self.own_tick)) / max(wall - self.wall_tick, 1e-9)
        self.busy_tick, self.wall_tick, self.own_tick = busy, wall, own
        self.series.append(foreign)
        return {"foreign_cpu_cores": round(foreign, 3)}

    def stop(self) -> dict[str, dict[str, Any]]:
        try:
            self._own()
            process, interrupt = self._core_seconds()
            busy, interrupts, wall = (
                process - self.busy0,
                interrupt - self.interrupts0,
                time.perf_counter() - self.wall0,
            )
        except psutil.Error as exc:  # never crash the run: the gap is recorded
            return {"foreign_cpu": missing("cores", method(self.span), f"psutil failed: {exc}")}
        own = self._own_seconds()
        foreign = max(0.0, busy - own) / max(wall, 1e-9)
        return {
            "foreign_cpu": metric(
                foreign,
                "cores",
                method(self.span),
                collector=self.name,
                cores=self.cores,
                run_cores_busy=round(own / max(wall, 1e-9), 3),
                interrupt_cores=round(interrupts / max(wall, 1e-9), 3),
                processes_of_run=len(self.last),
                peak_tick_cores=round(max(self.series), 3) if self.series else None,
                **(
                    {
                        "note": f"the launcher (pid {self.launcher_gone}) ended during the window: the run's tree grew "
                        "from the agent after it"
                    }
                    if self.launcher_gone is not None
                    else {}
                ),
            )
        }
