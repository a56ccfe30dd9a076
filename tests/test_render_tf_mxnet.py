"""The rendered Slurm, Kubernetes and compose files of data-parallel TensorFlow and MXNet jobs:
each passes its checker, and the processes each one starts get their role's environment (the
rendered command's own arguments handed to tbdkit.launch.node)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tbdkit.launch import render
from tbdkit.spec import run_spec as specs
from tbdkit.core.errors import UserError
from tbdkit.launch.node import node_roles

KEY = "ab" * 16


def job(framework: str) -> specs.RunSpec:
    model = "inception_v3" if framework == "tensorflow" else "resnet50"
    return specs.build(model=model, framework=framework, batch_size=32, preset="paper", launcher="netns",
                       nodes=2, gpus_per_node=4)


def launched(spec: specs.RunSpec, args: str, index: int, pod_ip: str) -> list:
    """The roles `python -m tbdkit.launch.node ...` in this rendered command starts on pod `index`."""
    words = shlex.split(args.replace('"$JOB_COMPLETION_INDEX"', str(index)))
    words = words[words.index("tbdkit.launch.node") + 1:]
    opts = dict(w.removeprefix("--").split("=", 1) for w in words if w.startswith("--") and "=" in w)
    return node_roles(spec, opts["hosts"].split(","), int(opts["node"]), opts["roles"], KEY, pod_ip,
                      opts.get("scheduler"))


@pytest.mark.parametrize("framework", ["mxnet", "tensorflow"])
def test_kubernetes_manifest_validates_and_gives_each_pod_its_role(tmp_path, framework):
    job_spec = job(framework)
    path = render.write(job_spec, "k8s", tmp_path, image=f"tbdkit/{framework}:0.1.0", run_id="obs12")
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    jobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Job"}
    expected = ["tbdkit-obs12-sched", "tbdkit-obs12-server", "tbdkit-obs12"] if framework == "mxnet" else ["tbdkit-obs12"]
    assert list(jobs) == expected  # MXNet's scheduler and server pods beside the workers'
    validate = Path(sys.executable).with_name("kubernetes-validate")
    proc = subprocess.run([str(validate), "--strict", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0 and (proc.stdout + proc.stderr).count("passed") == len(docs), proc.stdout + proc.stderr
    service = next(d for d in docs if d["kind"] == "Service")
    envs: dict[str, dict[str, str]] = {}
    for j in jobs.values():
        pod = j["spec"]["template"]
        assert pod["metadata"]["labels"] == service["spec"]["selector"]  # every pod has a DNS name under the Service
        (container,) = pod["spec"]["containers"]
        assert {e["name"] for e in container["env"]} == {"TBDKIT_CONTROL_KEY", "MY_HOST"}
        for index in range(j["spec"]["completions"]):
            for role in launched(job_spec, container["args"][0], index, f"10.1.{index}.{len(envs)}"):
                envs[role.name] = role.env
    dns0, dns1 = "tbdkit-obs12-0.tbdkit-obs12", "tbdkit-obs12-1.tbdkit-obs12"
    workers = [f"rank{r}" for r in range(8)]
    assert [n for n in envs if n.startswith("rank")] == workers
    assert all(envs[w]["MASTER_ADDR"] == dns0 and envs[w]["WORLD_SIZE"] == "8" for w in workers)
    if framework == "mxnet":
        assert sorted(envs) == sorted(["scheduler", "server0", "server1", *workers])
        assert {envs[n]["DMLC_ROLE"] for n in envs} == {"scheduler", "server", "worker"}
        assert envs["scheduler"]["DMLC_ROLE"] == "scheduler" and envs["server1"]["DMLC_ROLE"] == "server"
        assert all(e["DMLC_PS_ROOT_URI"] == "tbdkit-obs12-sched-0.tbdkit-obs12" for e in envs.values())
        assert all(e["DMLC_NUM_WORKER"] == "8" and e["DMLC_NUM_SERVER"] == "2" for e in envs.values())
        assert all(e["DMLC_NODE_HOST"].startswith("10.1.") for e in envs.values())  # the pod's own IP
    else:
        config = json.loads(envs["rank5"]["TF_CONFIG"])
        assert config["task"] == {"type": "worker", "index": 5}
        assert config["cluster"]["worker"] == [f"{dns0}:{29501 + r}" for r in range(4)] + [f"{dns1}:{29501 + r}" for r in range(4, 8)]
        assert not any(k.startswith("DMLC_") for e in envs.values() for k in e)


@pytest.mark.parametrize("framework", ["mxnet", "tensorflow"])
def test_slurm_and_compose_files_pass_their_checkers(tmp_path, framework):
    spec = job(framework)
    slurm = render.write(spec, "slurm", tmp_path / "slurm", image=f"tbdkit/{framework}:0.1.0")
    assert subprocess.run(["bash", "-n", str(slurm)], capture_output=True).returncode == 0
    text = slurm.read_text()
    assert "python -u -m tbdkit.launch.node --node=\"$SLURM_NODEID\" --hosts=\"$HOSTS\"" in text
    assert "torch.distributed.run" not in text and "export HOSTS TBDKIT_CONTROL_KEY" in text
    compose = render.write(spec, "compose", tmp_path / "compose", image=f"tbdkit/{framework}:0.1.0")
    services = yaml.safe_load(compose.read_text())["services"]
    assert list(services) == ["node0", "node1"]
    for n, service in enumerate(services.values()):
        assert f"tbdkit.launch.node --node={n} --hosts=node0,node1" in service["command"][2]
        assert len(service["environment"]["TBDKIT_CONTROL_KEY"]) == 32
    checker = shutil.which("docker-compose")
    if checker is None:
        if os.environ.get("CI"):
            pytest.fail(".ci/run installs docker-compose")
        pytest.skip("no docker-compose here")
    proc = subprocess.run([checker, "-f", str(compose), "config", "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_torchrun_target_is_pytorchs():
    with pytest.raises(UserError, match="torchrun target is PyTorch's"):
        render.render(job("mxnet"), "torchrun", image="tbdkit/mxnet:0.1.0")
