"""slurm.toml and the flags of `--launcher slurm`: what the job file gets, and each mistake one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from tbdkit.core.errors import UserError
from tbdkit.launch import render
from tbdkit.launch.slurm import Job, exit_code, load_options, verdict
from tbdkit.spec import run_spec as specs


def test_slurm_toml_then_flags_reach_the_job_file(tmp_path):
    config = tmp_path / "slurm.toml"
    config.write_text('partition = "gpu"\naccount = "proj"\ntime = "00:30:00"\noptions = ["--qos=high"]\n')
    options = load_options(config, time="10", account=None)
    spec = specs.build(model="resnet50", batch_size=2, launcher="slurm", nodes=2, device="cpu")
    text = render.render(spec, "slurm", native=True, slurm=options.values(spec, "out-%j.txt"))
    directives = [line.split(None, 1)[1] for line in text.splitlines() if line.startswith("#SBATCH")]
    assert {"--partition=gpu", "--account=proj", "--time=10", "--qos=high", "--nodes=2", "--output=out-%j.txt",
            "--cpus-per-task=1"} <= set(directives)
    assert not any(d.startswith("--gpus") for d in directives)  # --device cpu asks for no GPU


@pytest.mark.parametrize("text, flags, words", [
    ('partion = "gpu"\n', {}, "unknown key(s) partion"),
    ("", {"time": "half an hour"}, "time limit"),
    ("", {"options": ("--qos=high\n--x",)}, "one option on one line"),
    ("time = [\n", {}, "cannot be read as TOML"),
])
def test_a_wrong_setting_is_one_sentence(tmp_path, text, flags, words):
    config = tmp_path / "slurm.toml"
    config.write_text(text)
    with pytest.raises(UserError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_options(config, **flags)


def test_slurm_ends_become_the_summary():
    tmp = Path(".")
    job = Job("7", tmp, state="TIMEOUT", reason="TimeLimit",
              exit_code="0:15", time_limit="00:01:00")
    s = verdict(job, {"status": "interrupted", "error": None})
    assert s["status"] == "failed" and s["error"].startswith("Slurm ended job 7 (TIMEOUT, reason TimeLimit")
    assert s["slurm"]["state"] == "TIMEOUT" and exit_code(job) == -15
    oom = verdict(Job("8", tmp, state="OUT_OF_MEMORY"), {"status": "failed", "error": "x"})
    assert oom["status"] == "oom" and "before that: x" in oom["error"]
    cancelled = Job("9", tmp, state="CANCELLED", cancelled=True)
    assert verdict(cancelled, {"status": "ok"})["status"] == "interrupted" and exit_code(cancelled) == 130
    assert exit_code(Job("10", tmp, state="COMPLETED", exit_code="0:0")) == 0
    assert exit_code(Job("11", tmp, state="FAILED", exit_code="3:0")) == 3
