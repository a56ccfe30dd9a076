"""The netns launcher on one GPU machine: each namespace node gets GPUs of its own, a NCCL host id
of its own and no same-host transport, so NCCL neither sees two ranks on one GPU nor bypasses the
shaped link; the agent records those settings in env.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvml_shim import Device, fake_nvml  # noqa: F401  (fixture)
from tbdkit.spec import run_spec as specs
from tbdkit.env import machine as envinfo
from tbdkit.core.errors import UserError
from tbdkit.launch import netns

UUIDS = [f"GPU-{i}{i}{i}{i}0000-0000-0000-0000-000000000000" for i in range(4)]


def env_of(cmd: list[str]) -> dict[str, str]:
    start = cmd.index("env") + 1
    return dict(a.split("=", 1) for a in cmd[start:cmd.index(next(a for a in cmd[start:] if "=" not in a))])


@pytest.fixture
def net() -> netns.Network:
    return netns.Network(tag="ab12", nodes=2, subnet=7)


def test_each_node_gets_its_own_gpus_and_nccl_host(net, monkeypatch, fake_nvml):
    monkeypatch.setattr(netns.stacks, "require", lambda fw: Path("/venv/bin/python"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_nvml([Device(u, f"00000000:{0x18 + i:02X}:00.0") for i, u in enumerate(UUIDS)])
    spec = specs.build(model="resnet50", batch_size=2, launcher="netns", nodes=2, gpus_per_node=2, device="cuda")
    envs = [env_of(netns.node_command(spec, Path("/r"), net, n, 29500)) for n in range(2)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == [f"{UUIDS[0]},{UUIDS[1]}", f"{UUIDS[2]},{UUIDS[3]}"]
    assert envs[0]["NCCL_HOSTID"] != envs[1]["NCCL_HOSTID"]
    for e in envs:
        assert e["NCCL_P2P_DISABLE"] == e["NCCL_SHM_DISABLE"] == e["NCCL_IB_DISABLE"] == "1"
    assert json.loads(envs[1]["TBDKIT_LAUNCH_NODE"])["CUDA_VISIBLE_DEVICES"] == envs[1]["CUDA_VISIBLE_DEVICES"]
    # the caller's own CUDA_VISIBLE_DEVICES is split, not overridden
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    one = specs.build(model="resnet50", batch_size=2, launcher="netns", nodes=2, gpus_per_node=1, device="cuda")
    assert [env_of(netns.node_command(one, Path("/r"), net, n, 1))["CUDA_VISIBLE_DEVICES"] for n in (0, 1)] == ["3", "1"]
    with pytest.raises(UserError, match="need 4 GPUs and this machine has 2"):
        netns.node_command(spec, Path("/r"), net, 0, 1)


def test_cpu_nodes_get_no_gpu_list_and_env_json_records_the_settings(net, monkeypatch):
    monkeypatch.setattr(netns.stacks, "require", lambda fw: Path("/venv/bin/python"))
    spec = specs.build(model="resnet50", batch_size=2, launcher="netns", nodes=2, device="cpu")
    env = env_of(netns.node_command(spec, Path("/r"), net, 1, 1, gpus=UUIDS))
    assert "CUDA_VISIBLE_DEVICES" not in env and env["NCCL_HOSTID"] == net.ns(1)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    recorded = envinfo.collect({}, 0)["launch_env"]
    assert recorded["NCCL_P2P_DISABLE"] == "1" and recorded["NCCL_HOSTID"] == net.ns(1)
    assert recorded["netns_node"]["node"] == 1
