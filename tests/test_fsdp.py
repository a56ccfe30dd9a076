"""--parallel fsdp: Llama trained by two gloo workers on this machine's CPU with FSDP2 (fully_shard per decoder
layer, then the model), as a user types it, against DDP for the same seed (that DDP job also checked as every
data-parallel job on one machine is: tests/test_distributed.py); the refusals; the rendered files."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from tbdkit.core.errors import UserError
from tbdkit.launch import render
from tbdkit.results.summary import MEASURED
from tbdkit.spec import run_spec as specs

from test_distributed import assert_workers_trained_together, bench

LLAMA = ["--model", "llama", "--framework", "pytorch", "--preset", "smoke", "--device", "cpu", "--batch", "2",
         "--max-warmup-s", "2", "--max-measure-s", "4", "--gpus-per-node", "2", "--json"]


def losses(path: Path) -> list[float]:
    with path.open() as f:
        return [float(row["loss"]) for row in csv.DictReader(f)]


def rank_losses(results: Path, summary: dict) -> list[list[float]]:
    run = results / summary["run_id"]
    return [losses(run / "iterations.csv"), losses(run / "workers" / "rank1" / "iterations.csv")]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    """The results folder, the FSDP2 job's summary and the DDP job's (2 gloo workers each, the same seed)."""
    results = tmp_path_factory.mktemp("fsdp") / "results"
    proc, fsdp = bench(results, "--parallel", "fsdp", base=LLAMA)
    assert proc.returncode == 0 and fsdp is not None, proc.stdout[-2000:] + proc.stderr[-3000:]
    proc, ddp = bench(results, base=LLAMA)
    assert proc.returncode == 0 and ddp is not None, proc.stdout[-2000:] + proc.stderr[-3000:]
    return results, fsdp, ddp


def test_ddp_on_two_workers_of_one_machine(jobs):
    """torchrun's 2 workers, DDP over gloo, no single-worker run to scale against."""
    results, _, ddp = jobs
    assert_workers_trained_together(results, ddp, 2, "pytorch", None)


def test_fsdp_shards_llama_and_trains_as_ddp_does(jobs):
    results, fsdp, ddp = jobs
    assert fsdp["status"] in MEASURED and fsdp["world_size"] == 2
    run = results / fsdp["run_id"]
    assert json.loads((run / "spec.json").read_text())["parallel"] == "fsdp"
    # Each rank holds half of every parameter (FSDP2 shards dim 0; the smoke model's dims are even), DDP all of it.
    rank1 = json.loads((run / "workers" / "rank1" / "summary.json").read_text())
    for info in (fsdp["model_info"], rank1["model_info"]):
        assert info["parallel"] == "fsdp" and info["parameters"] == ddp["model_info"]["parameters"]
        assert info["local_parameters"] * 2 == info["parameters"]
        assert info["local_parameter_bytes"] * 2 == info["parameter_bytes"]
    assert ddp["model_info"]["parallel"] == "ddp" and "local_parameters" not in ddp["model_info"]
    # Each rank's memory after the window: its weight and gradient shards (fp32, half the model each) and AdamW's
    # state over its shard (two moments of each weight, and a step counter per parameter tensor); DDP records none.
    shards = fsdp["shard_memory"]
    assert shards["unit"] == "bytes" and len(shards["ranks"]) == 2 and "shard_memory" not in ddp
    half = fsdp["model_info"]["local_parameter_bytes"]
    for rank in shards["ranks"]:
        assert rank["weights"] == rank["weight_gradients"] == half
        assert 2 * half < rank["optimizer_state"] <= 2 * half + 8 * 64
    assert fsdp["metrics"]["communication_time"]["value"] is None
    assert "FSDP2" in fsdp["metrics"]["communication_time"]["reason"]
    # Same seed, same batches per rank, gradients averaged over the ranks either way: the same losses, step by
    # step, on both ranks (the windows end by time, so the runs' lengths differ; their common start is compared).
    for sharded, replicated in zip(rank_losses(results, fsdp), rank_losses(results, ddp), strict=True):
        n = min(len(sharded), len(replicated))
        assert n >= 3
        assert sharded[:n] == pytest.approx(replicated[:n], rel=1e-4)
        assert sharded[n - 1] < sharded[0]


def test_fsdp_refusals():
    with pytest.raises(UserError, match="fsdp .*built for llama on PyTorch"):
        specs.build(model="resnet50", batch_size=2, gpus_per_node=2, parallel="fsdp")
    with pytest.raises(UserError, match="fsdp .*built for llama on PyTorch"):
        specs.build(model="llama", framework="mxnet", batch_size=2, gpus_per_node=2, parallel="fsdp")
    with pytest.raises(UserError, match="--gpus-per-node 2 or more"):
        specs.build(model="llama", batch_size=2, parallel="fsdp")
    assert specs.build(model="llama", batch_size=2, gpus_per_node=2).parallel == "ddp"


def test_rendered_fsdp_files(tmp_path):
    out = tmp_path / "render"
    proc = subprocess.run(
        [".venv/bin/tbdkit", "render", "--target", "torchrun", "--model", "llama", "--preset", "smoke",
         "--nodes", "2", "--gpus-per-node", "2", "--parallel", "fsdp", "-o", str(out)],
        capture_output=True, text=True, cwd=Path(__file__).parents[1],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((out / "spec.json").read_text())["parallel"] == "fsdp"
    assert "--parallel fsdp" in (out / "torchrun.sh").read_text()
    spec = specs.build(model="llama", batch_size=2, launcher="netns", nodes=2, gpus_per_node=2, parallel="fsdp")
    slurm = render.write(spec, "slurm", tmp_path / "slurm", image="tbdkit/pytorch:0.1.0")
    assert "--parallel fsdp" in slurm.read_text()
    assert json.loads((slurm.parent / "spec.json").read_text())["parallel"] == "fsdp"
    assert subprocess.run(["bash", "-n", str(slurm)], capture_output=True).returncode == 0
