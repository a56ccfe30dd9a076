"""Data-parallel TensorFlow and MXNet, the quick half: the spec's rules, each role's environment
(TF_CONFIG, DMLC_*), the workers' control channel, and naming the worker that failed first."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tbdkit.spec import run_spec as specs
from tbdkit.agent.control import Control, PeerLost
from tbdkit.core.errors import UserError
from tbdkit.launch import group
from tbdkit.launch.roles import roles
from tbdkit.launch.workers import name_failed_workers


def test_the_spec_takes_tensorflow_and_mxnet_jobs():
    assert specs.build(model="resnet50", framework="mxnet", batch_size=2, gpus_per_node=2).world_size == 2
    assert specs.build(model="inception_v3", framework="tensorflow", batch_size=2, nodes=2,
                       launcher="netns", link_rate="1gbit").world_size == 2
    with pytest.raises(UserError, match="data-parallel TensorFlow .* is built for inception_v3, minigo, resnet50"):
        specs.build(model="deepspeech2", framework="tensorflow", batch_size=2, gpus_per_node=2)
    # MiniGo's step ends with the shared update that averages the replicas' gradients (its mean checked under
    # a strategy: tests/tensorflow/test_one_process_tensorflow.py); one process of replicas stays the classifiers'
    assert specs.build(model="minigo", framework="tensorflow", batch_size=2, gpus_per_node=2).world_size == 2
    with pytest.raises(UserError, match="one_process: built for inception_v3, resnet50"):
        specs.build(model="minigo", framework="tensorflow", batch_size=2, gpus_per_node=2, one_process=True)


def test_mxnet_roles_on_two_nodes():
    spec = specs.build(model="resnet50", framework="mxnet", batch_size=2, nodes=2, gpus_per_node=2, launcher="netns")
    job = roles(spec, ["10.0.0.1", "10.0.0.2"], 30000, "ab" * 16)
    assert [r.name for r in job] == ["scheduler", "server0", "server1", "rank0", "rank1", "rank2", "rank3"]
    by = {r.name: r for r in job}
    assert by["scheduler"].env["DMLC_ROLE"] == "scheduler" and by["scheduler"].node == 0
    assert by["server1"].env["DMLC_ROLE"] == "server" and by["server1"].env["DMLC_NODE_HOST"] == "10.0.0.2"
    for r in job:  # every process finds the scheduler on node 0 and knows the job's size
        assert r.env["DMLC_PS_ROOT_URI"] == "10.0.0.1" and r.env["DMLC_PS_ROOT_PORT"] == "30001"
        assert r.env["DMLC_NUM_SERVER"] == "2" and r.env["DMLC_NUM_WORKER"] == "4"
    rank3 = by["rank3"].env
    assert rank3["DMLC_ROLE"] == "worker" and rank3["DMLC_NODE_HOST"] == "10.0.0.2"
    assert (rank3["RANK"], rank3["LOCAL_RANK"], rank3["GROUP_RANK"], rank3["WORLD_SIZE"]) == ("3", "1", "1", "4")
    assert rank3["MASTER_ADDR"] == "10.0.0.1" and rank3["MASTER_PORT"] == "30000"
    assert "TF_CONFIG" not in rank3 and "CUDA_VISIBLE_DEVICES" not in rank3


def test_tensorflow_roles_write_tf_config_per_worker():
    spec = specs.build(model="inception_v3", framework="tensorflow", batch_size=2, nodes=2, gpus_per_node=2,
                       launcher="netns")
    job = roles(spec, ["10.0.0.1", "10.0.0.2"], 30000, "ab" * 16, gpus=["GPU-a", "GPU-b", "GPU-c", "GPU-d"])
    assert [r.name for r in job] == ["rank0", "rank1", "rank2", "rank3"]  # no parameter servers
    configs = [json.loads(r.env["TF_CONFIG"]) for r in job]
    workers = ["10.0.0.1:30001", "10.0.0.1:30002", "10.0.0.2:30003", "10.0.0.2:30004"]
    assert all(c["cluster"] == {"worker": workers} for c in configs)
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(4)]
    # one GPU per worker: the strategy makes a replica of every GPU a worker sees
    assert [r.env["CUDA_VISIBLE_DEVICES"] for r in job] == ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]
    assert not any(k.startswith("DMLC_") for r in job for k in r.env)


def test_too_few_gpus_is_a_user_error():
    spec = specs.build(model="resnet50", framework="mxnet", batch_size=2, gpus_per_node=4, device="cuda")
    with pytest.raises(UserError, match="need 4 GPUs and this machine has 2"):
        group.gpus_for(spec, ["GPU-a", "GPU-b"])
    assert group.gpus_for(spec.model_copy(update={"device": "cpu"}), ["GPU-a"]) is None


def _members(n: int, port: int) -> list[Control]:
    return [Control(rank, n, ("127.0.0.1", port), b"k" * 16) for rank in range(n)]


def _together(members: list[Control], call) -> list:  # noqa: ANN001
    out: list = [None] * len(members)
    errors: list = [None] * len(members)

    def one(i: int) -> None:
        try:
            out[i] = call(members[i])
        except Exception as exc:  # noqa: BLE001  (the test looks at it)
            errors[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(members))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return [e if e is not None else o for o, e in zip(out, errors)]


def test_the_control_channel_agrees_and_gathers():
    members = _members(3, group.new_port())
    _together(members, lambda m: m.join())
    flags = {0: [False, False], 1: [False, True], 2: [True, False]}
    assert _together(members, lambda m: m.agree(flags[m.rank])) == [[True, True]] * 3
    assert _together(members, lambda m: m.gather((m.rank, m.rank * 1.5))) == [[(0, 0.0), (1, 1.5), (2, 3.0)]] * 3
    _together(members, lambda m: m.leave())


def test_a_worker_gone_from_the_control_channel_is_named():
    members = _members(2, group.new_port())
    _together(members, lambda m: m.join())
    members[1].leave()  # as a worker that died: its socket closes
    with pytest.raises(PeerLost, match="worker rank 1 went away"):
        members[0].agree([False])
    members[0].leave()


@pytest.mark.parametrize("code, said", [("3", "died before writing its results (exit code 3)"),
                                        ("-9", "was killed by SIGKILL before writing its results")])
def test_the_worker_that_exited_is_named_not_rank_0_ended_after_it(tmp_path: Path, code: str, said: str):
    """The group launcher writes the first failure in torchrun's words (a signal as a negative exit code, said by
    its name) and then ends the others, rank 0 among them, which leaves no summary either: the one that exited
    first is named."""
    spec = specs.build(model="resnet50", framework="mxnet", batch_size=2, gpus_per_node=2)
    (tmp_path / "workers").mkdir()
    (tmp_path / "log.txt").write_text(f"worker failed:\n  rank: 1 (local_rank: 1)\n  exitcode: {code} (pid: 42)\n")
    stand_in = {"run_id": tmp_path.name, "status": "failed", "error": "the agent exited with code -9", "exit_code": -9}
    (tmp_path / "summary.json").write_text(json.dumps(stand_in))
    status, summary = name_failed_workers(tmp_path, spec, -9, stand_in)
    assert status == "failed" and summary["failed_worker"]["rank"] == 1
    assert summary["error"].startswith(f"worker rank 1 (node 0) {said}; ")



def test_of_two_workers_reported_dead_the_one_a_signal_killed_is_named(tmp_path: Path):
    """Rank 0 exited 1 on losing rank 1, which the OOM killer ended; neither wrote a summary, and the node reported
    both at one look: rank 1 is named, by its signal."""
    spec = specs.build(model="resnet50", framework="mxnet", batch_size=2, gpus_per_node=2)
    (tmp_path / "workers").mkdir()
    (tmp_path / "log.txt").write_text("worker failed:\n  rank: 1 (local_rank: 1)\n  exitcode: -9 (pid: 42)\n"
                                      "worker failed:\n  rank: 0 (local_rank: 0)\n  exitcode: 1 (pid: 41)\n")
    stand_in = {"run_id": tmp_path.name, "status": "failed", "error": "the agent was killed", "exit_code": -9}
    _, summary = name_failed_workers(tmp_path, spec, -9, stand_in)
    assert summary["error"].startswith("worker rank 1 (node 0) was killed by SIGKILL before writing"), summary["error"]

def test_a_job_whose_launcher_was_killed_says_by_which_signal(tmp_path: Path):
    """Every worker wrote its summary, yet the job's launcher was killed: said by its signal."""
    spec = specs.build(model="resnet50", framework="mxnet", batch_size=2, gpus_per_node=2)
    for rank, folder in ((0, tmp_path), (1, tmp_path / "workers" / "rank1")):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "summary.json").write_text(json.dumps({"status": "ok", "worker": f"rank {rank} of 2"}))
    _, summary = name_failed_workers(tmp_path, spec, -15, {"status": "ok", "error": None})
    assert summary["error"].startswith("the job's launcher was killed by SIGTERM; "), summary["error"]


def test_workers_that_failed_before_the_launcher_looked_are_reported(tmp_path: Path):
    """Rank 1 exits with code 3 and rank 0 at once (its peer lost), both before the group launcher's watcher first
    looks: every worker that failed is still written in torchrun's words, so the one that exited is named."""
    spec = specs.build(model="mlp_numpy", framework="numpy", batch_size=2, gpus_per_node=2, device="cpu")
    job = [r for r in roles(spec, ["127.0.0.1"], group.new_port(), "ab" * 16) if r.rank is not None]
    exits = {0: 1, 1: 3}
    code = group.run(spec, tmp_path, lambda *event: None, job, prefix=lambda role: ["sh", "-c", f"exit {exits[role.rank]}"])
    log = (tmp_path / "log.txt").read_text()
    assert code == 1
    assert "rank: 1 (local_rank: 1)\n  exitcode: 3 (pid: " in log and "rank: 0 (local_rank: 0)\n  exitcode: 1 (pid: " in log
    own = {"run_id": tmp_path.name, "status": "failed", "error": "worker rank 1 went away", "worker": "rank 0 of 2"}
    (tmp_path / "summary.json").write_text(json.dumps(own))  # rank 0's, as its agent writes it: rank 1 wrote none
    status, summary = name_failed_workers(tmp_path, spec, 1, own)
    assert status == "failed" and summary["failed_worker"]["rank"] == 1
    assert summary["error"].startswith("worker rank 1 (node 0) died before writing its results (exit code 3)")
