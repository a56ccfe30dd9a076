"""One node's part of a data-parallel TensorFlow or MXNet job on a cluster: what torchrun is per
node for PyTorch, for the files `tbdkit render` writes (Slurm, Kubernetes, compose). It starts the
processes tbdkit.launch.roles gives this node, each with its role's environment, in this Python
(the container's), and waits for them; the first that fails ends the others, its rank and exit
code written in torchrun's words. Rank 0's output is this process's; the others' go to
workers/<role>.log in the run folder.

    python -m tbdkit.launch.node --spec S --run-dir D --node N --hosts h0,h1,... [--roles workers] [--scheduler H]

The job's control-channel key comes from TBDKIT_CONTROL_KEY (the rendered file sets it);
MY_HOST, where set (a pod's own IP), is the address this node's ps-lite processes announce."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tbdkit.launch.roles import MXNET_SERVER_CODE, NODE_PORT, Role, roles, worker_failed
from tbdkit.results.rundir import RunDir
from tbdkit.spec import run_spec as specs

KINDS = ("all", "workers", "servers", "scheduler")


def _kind(role: Role) -> str:
    return "workers" if role.rank is not None else "scheduler" if role.name == "scheduler" else "servers"


def node_roles(
    spec: specs.RunSpec,
    hosts: list[str],
    node: int,
    kind: str,
    key: str,
    my_host: str | None = None,
    scheduler: str | None = None,
    port: int = NODE_PORT,
) -> list[Role]:
    """The roles of `kind` this node runs (MXNet's scheduler is node 0's, one server per node, unless
    they run apart: `scheduler` is then the scheduler's host, `my_host` the address this node announces)."""
    chosen = [
        r for r in roles(spec, hosts, port, key, shared_cores=False) if r.node == node and kind in ("all", _kind(r))
    ]
    out = []
    for r in chosen:
        env = dict(r.env)
        if "DMLC_ROLE" in env:
            env.update({"DMLC_NODE_HOST": my_host} if my_host else {})
            env.update({"DMLC_PS_ROOT_URI": scheduler} if scheduler else {})
        out.append(Role(r.name, r.node, env, r.rank, r.local_rank))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbdkit.launch.node", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument(
        "--hosts", required=True, help="every node's host name or address, node 0 first, comma-separated"
    )
    parser.add_argument("--roles", choices=KINDS, default="all")
    parser.add_argument("--scheduler", help="MXNet: the scheduler's host where it runs apart from node 0 (its own pod)")
    args = parser.parse_args(argv)
    spec = specs.load(args.spec)
    key = os.environ.get("TBDKIT_CONTROL_KEY", "")
    if len(key) < 32:
        parser.error("TBDKIT_CONTROL_KEY must hold the job's shared key (32 hex digits), the same on every node")
    hosts = [h for h in args.hosts.split(",") if h]
    mine = node_roles(spec, hosts, args.node, args.roles, key, os.environ.get("MY_HOST"), args.scheduler)
    RunDir(args.run_dir).workers.mkdir(parents=True, exist_ok=True)
    procs: list[tuple[Role, subprocess.Popen[bytes]]] = []
    for role in mine:
        cmd = (
            [sys.executable, "-u", "-c", MXNET_SERVER_CODE]
            if role.rank is None
            else [sys.executable, "-u", "-m", "tbdkit.agent", "--spec", str(args.spec), "--run-dir", str(args.run_dir)]
        )
        out = None if role.rank == 0 else RunDir(args.run_dir).role_log(role.name).open("wb")
        procs.append(
            (
                role,
                subprocess.Popen(
                    cmd, env={**os.environ, **role.env}, stdout=out, stderr=subprocess.STDOUT if out else None
                ),
            )
        )
    while True:
        states = [(role, proc, proc.poll()) for role, proc in procs]
        failed = [(r, p, c) for r, p, c in states if c is not None and c != 0]
        if failed:
            code = _report(failed)
            for _, other in procs:
                if other.poll() is None:
                    other.send_signal(signal.SIGTERM)
            return code if code > 0 else 128 - code  # killed by signal N: 128 + N, as a shell and srun say it
        if all(c == 0 for _, _, c in states):
            return 0
        time.sleep(0.5)


def _report(failed: list[tuple[Role, subprocess.Popen[bytes], int]]) -> int:
    """Every process found failed at one look, in torchrun's words (tbdkit.launch.workers reads them), and the code
    the node exits with. Several at one look (a worker killed and its peers ended on losing it, within the poll):
    one killed by a signal comes first, since a signal comes from outside (the OOM killer, kill -9) while an exit
    after it may have followed the peer's loss."""
    failed = sorted(failed, key=lambda f: f[2] > 0)  # stable: signals first, else in the roles' order
    for role, proc, code in failed:
        print(
            worker_failed(role, proc.pid, code)
            if role.rank is not None
            else f"{role.name} (node {role.node}) exited with code {code}",
            flush=True,
        )
    return failed[0][2]


if __name__ == "__main__":
    sys.exit(main())
