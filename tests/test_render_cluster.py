"""What the rendered cluster files give each node, read by the tools that run them: docker-compose's own
reading of compose.yaml, kubernetes-validate on the manifests, and the torchrun script run for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tbdkit.launch import render
from tbdkit.results import files as runfiles
from tbdkit.results.summary import MEASURED
from tbdkit.spec import run_spec as specs


def job(framework: str = "pytorch", nodes: int = 2, gpus: int = 4) -> specs.RunSpec:
    model = {"pytorch": "resnet50", "tensorflow": "inception_v3", "mxnet": "resnet50"}[framework]
    return specs.build(model=model, framework=framework, batch_size=32, preset="paper", launcher="netns",
                       nodes=nodes, gpus_per_node=gpus)


def compose_config(path: Path, env: dict[str, str]) -> dict:
    checker = shutil.which("docker-compose")
    if checker is None:
        if os.environ.get("CI"):
            pytest.fail(".ci/run installs docker-compose")
        pytest.skip("no docker-compose here")
    proc = subprocess.run([checker, "-f", str(path), "config"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


@pytest.mark.parametrize("framework", ["pytorch", "mxnet"])
def test_compose_gives_each_node_its_own_gpus_and_the_users_ids(tmp_path, framework):
    """Compose maps `count: N` to the host's GPUs 0..N-1 in every service; each node names its own. A shell
    sets UID but does not export it: the user comes from TBDKIT_UID/TBDKIT_GID, as compose.yaml's."""
    path = render.write(job(framework), "compose", tmp_path, image=f"tbdkit/{framework}:0.1.0")
    env = {**os.environ, "TBDKIT_UID": "1234", "TBDKIT_GID": "5678"}
    env.pop("UID", None)
    services = compose_config(path, env)["services"]
    gpus = {}
    for name, service in services.items():
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert "count" not in device and device["capabilities"] == ["gpu"]
        gpus[name] = device["device_ids"]
        assert service["user"] == "1234:5678"
    assert gpus == {"node0": ["0", "1", "2", "3"], "node1": ["4", "5", "6", "7"]}
    repo = yaml.safe_load((Path(__file__).parents[1] / "compose.yaml").read_text())
    assert {s["user"] for s in repo["services"].values()} == {"${TBDKIT_UID:-1000}:${TBDKIT_GID:-1000}"}


@pytest.mark.parametrize("framework", ["pytorch", "mxnet"])
def test_kubernetes_job_has_its_results_claim_and_requests_cpus_and_memory(tmp_path, framework):
    job_file = render.write(job(framework), "k8s", tmp_path, image=f"tbdkit/{framework}:0.1.0", run_id="j1")
    claim_file = tmp_path / "results-pvc.yaml"
    validate = Path(sys.executable).with_name("kubernetes-validate")
    for path in (job_file, claim_file):
        proc = subprocess.run([str(validate), "--strict", str(path)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    (claim,) = yaml.safe_load_all(claim_file.read_text())
    assert claim["kind"] == "PersistentVolumeClaim" and claim["spec"]["accessModes"] == ["ReadWriteMany"]
    pods = [d["spec"]["template"]["spec"] for d in yaml.safe_load_all(job_file.read_text()) if d and d["kind"] == "Job"]
    assert {v["persistentVolumeClaim"]["claimName"] for p in pods for v in p["volumes"] if "persistentVolumeClaim" in v} \
        == {claim["metadata"]["name"]}
    for pod in pods:
        (container,) = pod["containers"]
        requests = container["resources"]["requests"]
        gpus = container["resources"].get("limits", {}).get("nvidia.com/gpu", 0)
        assert set(requests) == {"cpu", "memory"}
        if gpus:
            assert (requests["cpu"], requests["memory"]) == (str(render.CPUS_PER_GPU * 4), f"{render.MEMORY_PER_GPU_GIB * 4}Gi")
    assert "kubectl apply -f results-pvc.yaml" in job_file.read_text()


def test_the_torchrun_script_runs_the_stacks_python_and_writes_the_mllog(tmp_path):
    """The script as a user runs it on a node where `python` is not the stack's (here: no `python` on PATH at
    all), and the run folder it leaves is finished as the kit's launchers finish theirs."""
    spec = specs.build(model="deepspeech2", framework="pytorch", batch_size=2, preset="smoke", device="cpu",
                       launcher="native", nodes=1, gpus_per_node=1, analyses=False,
                       measure={"max_warmup_s": 1.0, "max_measure_s": 2.0})
    script = render.write(spec, "torchrun", tmp_path / "job", results=str(tmp_path / "results"), run_id="r1")
    env = {**os.environ, "PATH": "/usr/bin:/bin", "NODE_RANK": "0"}
    env.pop("TBDKIT_PYTHON", None)
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # people's lines, not the agent's event lines; and the node's log.txt in the run folder
    assert "@@tbdkit" not in proc.stdout + proc.stderr
    assert "deepspeech2/pytorch/b2: warm-up ended after" in proc.stdout and "deepspeech2/pytorch/b2: done: " in proc.stdout
    run = tmp_path / "results" / "r1"
    log = (run / runfiles.LOG).read_text()
    assert log.startswith("$ ") and "torch.distributed.run" in log.splitlines()[0] and "warm-up ended after" in log
    summary = yaml.safe_load((run / runfiles.SUMMARY).read_text())
    assert summary["status"] in MEASURED and summary["loop_started_utc"]
    check = subprocess.run([sys.executable, "-m", "tbdkit.results.mllog", str(run / runfiles.MLLOG)],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("image, override, expected", [
    ("registry.example.com:5000/team/tbdkit-pytorch:0.1.0", None, "registry.example.com:5000#team/tbdkit-pytorch:0.1.0"),
    ("tbdkit/pytorch:0.1.0", None, "tbdkit/pytorch:0.1.0"),
    ("tbdkit/pytorch:0.1.0", "/shared/tbdkit pytorch.sqsh", "/shared/tbdkit pytorch.sqsh"),
])
def test_the_slurm_script_names_the_image_as_pyxis_reads_it(tmp_path, image, override, expected):
    """The batch script run as sbatch would run it (srun and scontrol stand-ins record their arguments):
    a registry's image in enroot's REGISTRY#IMAGE form, or the squashfs file `enroot import` made."""
    script = render.write(job(nodes=2, gpus=1), "slurm", tmp_path / "job", image=image, run_id="r1")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/srun.args\n')
    (bin_dir / "scontrol").write_text("#!/bin/sh\nprintf 'node1\\nnode2\\n'\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "node[1-2]",
           "RESULTS": str(tmp_path / "results")}
    env.pop("CONTAINER_IMAGE", None)
    if override:
        env["CONTAINER_IMAGE"] = override
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path / "job", capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "srun.args").read_text().splitlines()
    assert args[0] == f"--container-image={expected}"
    assert f"--container-mounts={tmp_path / 'results'}:/results" in args
