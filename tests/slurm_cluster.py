"""A real Slurm cluster on this machine for the Slurm tests: munged, slurmctld (in this network namespace,
reached at an address on the nodes' bridge) and two slurmd "machines", each in its own network namespace
(tbdkit.launch.netns.network) with its own host name (a UTS namespace) and its own /etc/hosts (bind-mounted
in its mount namespace), so a job's processes on n1 reach n0 by name over the veth link as between
machines. Client commands find it through SLURM_CONF. Every daemon is stopped by its PID at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tbdkit.launch import netns

NODES = ("n0", "n1")
CPUS = 2


@dataclass
class Cluster:
    root: Path
    net: netns.Network
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start_slurmd(self, node: int) -> None:
        name = NODES[node]
        # nsenter, not `ip netns exec`: that remounts /sys, and slurmd reads the host's cgroup mounts
        cmd = ["nsenter", f"--net=/run/netns/{self.net.ns(node)}", "unshare", "--uts", "--mount", "sh", "-c",
               f'mount --bind "$1" /etc/hosts && hostname {name} && exec slurmd -D -N {name} -f "$0"',
               str(self.conf), str(self.root / "hosts")]
        self.daemons[name] = subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL,
                                              stderr=open(self.root / f"slurmd-{name}.err", "w"))

    def kill_node(self, node: int) -> None:
        """The machine dies: every process in its namespace (its slurmd, its job's processes) is killed."""
        pids = subprocess.run(["ip", "netns", "pids", self.net.ns(node)], capture_output=True, text=True).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        self.daemons.pop(NODES[node]).wait()

    def sinfo(self) -> str:
        return subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True,
                              env=self.env).stdout

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = dict(line.split() for line in self.sinfo().splitlines() if line.strip())
            if len(states) == len(NODES) and all(s.rstrip("*") == "idle" for s in states.values()):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the Slurm nodes did not come up: {self.sinfo()}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.root.glob("*.log*")))

    def stop(self) -> None:
        for name, proc in reversed(list(self.daemons.items())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.daemons.clear()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _conf(root: Path, net: netns.Network, ctl_addr: str) -> str:
    lines = [
        "ClusterName=tbdkit",
        f"SlurmctldHost={socket.gethostname()}({ctl_addr})",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={root / 'munge.socket'}",
        "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool-%n'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}", f"SlurmdLogFile={root / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "ReturnToService=2", "SlurmdTimeout=10", "SlurmctldTimeout=10", "InactiveLimit=0", "KillWait=5",
        "OverTimeLimit=0", "MinJobAge=600", "SlurmdParameters=config_overrides", "MessageTimeout=10",
        f"PlugStackConfig={root / 'plugstack.conf'}",
    ]
    for i, name in enumerate(NODES):
        lines.append(f"NodeName={name} NodeAddr={net.addr(i)} NodeHostname={name} CPUs={CPUS} RealMemory=4000 State=UNKNOWN")
    lines.append(f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def cluster(root: Path):
    """munged, slurmctld and two slurmd in their namespaces; everything stopped and removed at the end."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "state").mkdir(exist_ok=True)
    (root / "plugstack.conf").write_text("")
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    with contextlib.ExitStack() as stack:
        net = stack.enter_context(netns.network(len(NODES), None))
        c = Cluster(root, net)
        stack.callback(c.stop)
        # this namespace joins the nodes' bridge: slurmctld and the client commands reach them, they reach it
        host, peer, ctl_addr = f"tb{net.tag}h", f"tb{net.tag}q", f"10.213.{net.subnet}.254"
        for cmd in (["ip", "link", "add", host, "type", "veth", "peer", "name", peer],
                    ["ip", "link", "set", peer, "netns", net.switch],
                    ["ip", "-n", net.switch, "link", "set", peer, "master", "br0", "up"],
                    ["ip", "addr", "add", f"{ctl_addr}/24", "dev", host], ["ip", "link", "set", host, "up"]):
            subprocess.run(cmd, check=True, capture_output=True)
        stack.callback(subprocess.run, ["ip", "link", "del", host], capture_output=True)
        hosts = "".join(f"{net.addr(i)} {name}\n" for i, name in enumerate(NODES))
        (root / "hosts").write_text(f"127.0.0.1 localhost\n{hosts}")  # each node's /etc/hosts (bind-mounted)
        for name in NODES:
            (root / f"spool-{name}").mkdir(exist_ok=True)
        c.conf.write_text(_conf(root, net, ctl_addr))
        c.daemons["munged"] = subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={root / 'munge.socket'}", f"--key-file={key}",
             f"--pid-file={root / 'munged.pid'}", f"--log-file={root / 'munged.log'}",
             f"--seed-file={root / 'munge.seed'}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not (root / "munge.socket").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        c.daemons["slurmctld"] = subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(c.conf)], env=c.env,
                                                  stdout=subprocess.DEVNULL,
                                                  stderr=open(root / "slurmctld.err", "w"))
        for i in range(len(NODES)):
            c.start_slurmd(i)
        c.wait_idle()
        yield c
