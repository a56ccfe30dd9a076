"""The processes of a data-parallel TensorFlow or MXNet job and the environment of each (paper
Sec. IV-E): what torchrun is to PyTorch, written out, the same for the native and netns launchers.

Every worker is one agent process with the framework-neutral worker environment the agent reads
(RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK, MASTER_ADDR/MASTER_PORT: rank 0's control channel,
TBDKIT_CONTROL_KEY) and its framework's own:
- TensorFlow, MultiWorkerMirroredStrategy: TF_CONFIG naming every worker's gRPC address and its own index.
- MXNet, kvstore dist_sync: the ps-lite roles, a scheduler on node 0 and one server per node
  (as MXNet's tools/launch.py starts them), through DMLC_ROLE, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT,
  DMLC_NUM_SERVER, DMLC_NUM_WORKER and DMLC_NODE_HOST (the address the process is reached at).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from tbdkit.spec.run_spec import RunSpec

# a rendered job's port on node 0 (rank 0's control channel, torchrun's rendezvous, MXNet's scheduler); kept
# here, not in tbdkit.launch.node, which `python -m` runs and the package therefore must not import
NODE_PORT = 29500
# `import mxnet` with DMLC_ROLE=scheduler or server runs that role until the workers finish
# (mxnet/kvstore/kvstore_server.py, at import).
MXNET_SERVER_CODE = "import mxnet"


@dataclass(frozen=True)
class Role:
    name: str  # rank<N>, scheduler, server<N>
    node: int
    env: dict[str, str]
    rank: int | None = None  # the worker's rank; None for MXNet's scheduler and servers
    local_rank: int = 0


def worker_failed(role: Role, pid: int, code: int) -> str:
    """A worker's failure in torchrun's words (a signal as a negative exit code), as the kit's launchers write
    it and tbdkit.launch.workers reads it back."""
    return f"worker failed:\n  rank: {role.rank} (local_rank: {role.local_rank})\n  exitcode: {code} (pid: {pid})"


def worker_env(spec: RunSpec, hosts: list[str], port: int, key: str, rank: int) -> dict[str, str]:
    node, local = divmod(rank, spec.gpus_per_node)
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(spec.world_size),
        "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(spec.gpus_per_node),
        "GROUP_RANK": str(node),
        "MASTER_ADDR": hosts[0],
        "MASTER_PORT": str(port),
        "TBDKIT_CONTROL_KEY": key,
    }


def tf_config(hosts: list[str], port: int, per_node: int, rank: int) -> str:
    """TF_CONFIG for worker `rank`: every worker's gRPC address (node's host, a port of its own)."""
    workers = [f"{hosts[r // per_node]}:{port + 1 + r}" for r in range(len(hosts) * per_node)]
    return json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}, separators=(",", ":")
    )


def dmlc_env(spec: RunSpec, hosts: list[str], port: int, role: str, node: int) -> dict[str, str]:
    return {
        "DMLC_ROLE": role,
        "DMLC_PS_ROOT_URI": hosts[0],
        "DMLC_PS_ROOT_PORT": str(port + 1),
        "DMLC_NUM_SERVER": str(spec.nodes),
        "DMLC_NUM_WORKER": str(spec.world_size),
        "DMLC_NODE_HOST": hosts[node],
    }


def threads_env(spec: RunSpec) -> dict[str, str]:
    """The workers share this machine's cores (as torchrun's per-node workers do on theirs)."""
    threads = str(max(1, (os.cpu_count() or 1) // spec.world_size))
    return {"OMP_NUM_THREADS": threads, "TF_NUM_INTRAOP_THREADS": threads}


def roles(
    spec: RunSpec, hosts: list[str], port: int, key: str, gpus: list[str] | None = None, shared_cores: bool = True
) -> list[Role]:
    """Every process of the job: MXNet's scheduler and servers first, then the workers by rank.
    `hosts[n]` is node n's address; `gpus`, this machine's GPUs when the job runs on them (each
    worker sees one: TensorFlow's strategy would make every GPU it sees a replica)."""
    if len(hosts) != spec.nodes:
        raise ValueError(f"{spec.nodes} nodes need {spec.nodes} host addresses, got {len(hosts)}")
    extra = threads_env(spec) if shared_cores else {}
    out: list[Role] = []
    if spec.framework == "mxnet":
        out.append(Role("scheduler", 0, {**extra, **dmlc_env(spec, hosts, port, "scheduler", 0)}))
        out.extend(
            Role(f"server{n}", n, {**extra, **dmlc_env(spec, hosts, port, "server", n)}) for n in range(spec.nodes)
        )
    for rank in range(spec.world_size):
        node, local = divmod(rank, spec.gpus_per_node)
        env = {**extra, **worker_env(spec, hosts, port, key, rank)}
        if spec.framework == "tensorflow":
            env["TF_CONFIG"] = tf_config(hosts, port, spec.gpus_per_node, rank)
        elif spec.framework == "mxnet":
            env.update(dmlc_env(spec, hosts, port, "worker", node))
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[rank]
        out.append(Role(f"rank{rank}", node, env, rank, local))
    return out
