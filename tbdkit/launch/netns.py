"""Several "machines" on this one: a network namespace per node, joined through a bridge by veth
pairs, each node's link optionally shaped with tc; one torchrun per node (static rendezvous on
node 0). It exists to measure multi-machine scaling (paper Fig. 9, Observation 12) where only
one machine is at hand; on real machines use the Slurm or Kubernetes renderers.

Needs root (namespaces, links, qdiscs) and iproute2. The namespaces are always removed, also on
failure or Ctrl-C, and every process of the job is stopped with its process group.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from tbdkit.core.errors import UserError
from tbdkit.env import stacks
from tbdkit.launch import group
from tbdkit.launch.base import Busy, EventHandler, quiet, stream
from tbdkit.launch.group import host_gpus
from tbdkit.launch.native import StackLauncher
from tbdkit.results.rundir import RunDir
from tbdkit.spec.run_spec import RunSpec

PREFIX = "tbdkit-"  # every namespace this launcher makes starts with it (tests check none is left)


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()}; the netns launcher needs root and iproute2.")


@dataclass
class Network:
    tag: str
    nodes: int
    subnet: int

    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.tag}-sw"

    def ns(self, node: int) -> str:
        return f"{PREFIX}{self.tag}-n{node}"

    def ifname(self, node: int) -> str:
        return f"tb{self.tag}n{node}"  # within the 15 characters Linux allows

    def addr(self, node: int) -> str:
        return f"10.213.{self.subnet}.{node + 1}"

    def namespaces(self) -> list[str]:
        return [self.switch, *(self.ns(i) for i in range(self.nodes))]


def preflight() -> None:
    if os.geteuid() != 0:
        raise UserError(
            "The netns launcher makes network namespaces, which needs root: run as root, or use "
            "--launcher native for several workers on one machine."
        )
    if shutil.which("ip") is None or shutil.which("tc") is None:
        raise UserError("The netns launcher needs iproute2 (`ip`, `tc`): apt-get install iproute2.")


@contextmanager
def network(nodes: int, link_rate: str | None) -> Iterator[Network]:
    """N namespaces on one bridge, each node's egress shaped to link_rate (tbf) when given."""
    preflight()
    net = Network(tag=secrets.token_hex(2), nodes=nodes, subnet=secrets.randbelow(250) + 1)
    try:
        _ip("netns", "add", net.switch)
        _ip("link", "add", "br0", "type", "bridge", ns=net.switch)
        _ip("link", "set", "br0", "up", ns=net.switch)
        for i in range(nodes):
            ns, dev, peer = net.ns(i), net.ifname(i), f"tb{net.tag}p{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", dev, "type", "veth", "peer", "name", peer)
            _ip("link", "set", dev, "netns", ns)
            _ip("link", "set", peer, "netns", net.switch)
            _ip("link", "set", peer, "master", "br0", "up", ns=net.switch)
            _ip("addr", "add", f"{net.addr(i)}/24", "dev", dev, ns=ns)
            _ip("link", "set", dev, "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)
            if link_rate:
                proc = subprocess.run(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        "tc",
                        "qdisc",
                        "add",
                        "dev",
                        dev,
                        "root",
                        "tbf",
                        "rate",
                        link_rate,
                        "burst",
                        "512kbit",
                        "latency",
                        "100ms",
                    ],
                    capture_output=True,
                    text=True,
                )
                if proc.returncode != 0:
                    raise UserError(f"Shaping {dev} to {link_rate} failed: {proc.stderr.strip()}.")
        yield net
    finally:
        for ns in reversed(net.namespaces()):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def node_env(spec: RunSpec, net: Network, node: int, gpus: list[str]) -> dict[str, str]:
    """What makes node `node` a machine of its own to torchrun and NCCL: its own GPUs (each node's
    LOCAL_RANK counts from 0 within them), its own NCCL host id (NCCL would otherwise see one host and
    refuse two ranks on one GPU, or use same-host paths), and no P2P, shared-memory or InfiniBand
    transport, so every byte between nodes crosses its (shaped) veth link, as between machines."""
    threads = max(1, (os.cpu_count() or 1) // spec.world_size)  # the "machines" share this one's cores
    env = {
        "OMP_NUM_THREADS": str(threads),
        "GLOO_SOCKET_IFNAME": net.ifname(node),
        "NCCL_SOCKET_IFNAME": net.ifname(node),
        "NCCL_HOSTID": net.ns(node),
        "NCCL_P2P_DISABLE": "1",
        "NCCL_SHM_DISABLE": "1",
        "NCCL_IB_DISABLE": "1",
    }
    if spec.device != "cpu" and gpus:
        per = spec.gpus_per_node
        if len(gpus) < spec.world_size:
            raise UserError(
                f"{spec.nodes} nodes x {per} GPUs need {spec.world_size} GPUs and this machine has "
                f"{len(gpus)}: use fewer --nodes or --gpus-per-node, or --device cpu."
            )
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[node * per : (node + 1) * per])
    return env


def node_command(
    spec: RunSpec, run_dir: Path, net: Network, node: int, port: int, gpus: list[str] | None = None
) -> list[str]:
    python = stacks.require(spec.framework)
    env = node_env(spec, net, node, host_gpus() if gpus is None else gpus)
    return [
        "ip",
        "netns",
        "exec",
        net.ns(node),
        "env",
        *(f"{k}={v}" for k, v in env.items()),
        f"TBDKIT_LAUNCH_NODE={json.dumps({'node': node, **env}, separators=(',', ':'))}",
        str(python),
        "-u",
        "-m",
        "torch.distributed.run",
        f"--nnodes={spec.nodes}",
        f"--node-rank={node}",
        f"--nproc-per-node={spec.gpus_per_node}",
        f"--master-addr={net.addr(0)}",
        f"--master-port={port}",
        "-m",
        "tbdkit.agent",
        "--spec",
        str(RunDir(run_dir).spec),
        "--run-dir",
        str(run_dir),
    ]


def run_roles(spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int:
    """A TensorFlow or MXNet job (tbdkit.launch.roles): each role's process in its node's namespace."""
    from tbdkit.launch.roles import roles

    with network(spec.nodes, spec.link_rate) as net:
        with RunDir(run_dir).log.open("a") as log:
            log.write(
                f"# {spec.nodes} nodes as namespaces {', '.join(net.namespaces())}; "
                f"10.213.{net.subnet}.0/24; link {spec.link_rate or 'unshaped'}\n"
            )
        job = roles(
            spec,
            [net.addr(n) for n in range(spec.nodes)],
            group.new_port(),
            group.new_key(),
            group.gpus_for(spec, host_gpus()),
        )
        job = [
            replace(r, env={**r.env, "TBDKIT_LAUNCH_NODE": json.dumps({"node": r.node}, separators=(",", ":"))})
            for r in job
        ]
        return group.run(spec, run_dir, on_event, job, prefix=lambda role: ["ip", "netns", "exec", net.ns(role.node)])


def run(spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int:
    """Node 0's output drives the progress display and goes to log.txt; node N's to workers/node<N>.log."""
    if spec.framework != "pytorch":
        return run_roles(spec, run_dir, on_event)
    rd = RunDir(run_dir)
    rd.workers.mkdir(exist_ok=True)
    procs: list[subprocess.Popen[str]] = []
    port = 29500 + secrets.randbelow(2000)
    with network(spec.nodes, spec.link_rate) as net, rd.log.open("a", buffering=1) as log:
        log.write(
            f"# {spec.nodes} nodes as namespaces {', '.join(net.namespaces())}; "
            f"10.213.{net.subnet}.0/24; link {spec.link_rate or 'unshaped'}\n"
        )
        try:
            gpus = host_gpus()
            for node in range(spec.nodes - 1, -1, -1):  # node 0 last: its stream is followed here
                cmd = node_command(spec, run_dir, net, node, port, gpus)
                log.write("$ " + shlex.join(cmd) + "\n")
                if node == 0:
                    procs.append(
                        subprocess.Popen(
                            cmd,
                            stdout=subprocess.PIPE,
                            stderr=log,
                            text=True,
                            bufsize=1,
                            start_new_session=True,
                            env=stacks.agent_env(),
                        )
                    )
                else:
                    out = rd.node_log(node).open("w")
                    procs.append(
                        subprocess.Popen(
                            cmd,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            text=True,
                            start_new_session=True,
                            env=stacks.agent_env(),
                        )
                    )
            head = procs[-1]

            def interrupt() -> None:
                for p in procs:
                    _signal(p, signal.SIGINT)

            code = stream(head, log, on_event, interrupt)
            others = [p.wait(timeout=180) for p in procs[:-1]]
            return code or next((c for c in others if c), 0)
        finally:
            for p in procs:  # nothing of the job outlives it
                if p.poll() is None:
                    _signal(p, signal.SIGTERM)
                    try:
                        p.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        _signal(p, signal.SIGKILL)
                        p.wait()


def _signal(proc: subprocess.Popen[str], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


class NetnsLauncher(StackLauncher):
    """The launcher (tbdkit.launch.base.Launcher) of several nodes as network namespaces of this machine;
    each node runs the framework stack's virtual environment."""

    name = "netns"

    def preflight(self, framework: str, device: str, setup: bool = False, busy: Busy = quiet) -> None:
        """Root and iproute2 (namespaces, links, qdiscs), then the framework's stack."""
        preflight()
        super().preflight(framework, device, setup, busy)

    def run(self, spec: RunSpec, run_dir: Path, on_event: EventHandler) -> int:
        return run(spec, run_dir, on_event)
