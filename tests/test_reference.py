"""The one-command reference run: it refuses without a GPU, picks two batch sizes, and its ncu
pass parses and merges a profile (a stand-in ncu script replays the fixture CSV)."""

from __future__ import annotations

import csv
import json
import os
import stat
from pathlib import Path

import pytest

from tbdkit import reference, spec as specs
from tbdkit.analysis.peak import Device
from tbdkit.errors import UserError

FIXTURE = Path(__file__).parent / "fixtures" / "ncu" / "raw_page.csv"


def test_refuses_without_a_gpu(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(reference, "gpu_count", lambda: 0)
    with pytest.raises(UserError, match="NVIDIA GPU"):
        reference.reference(["deepspeech2"], tmp_path, "fp32", 1, 1, 1, 1, True)
    assert reference.main(["--model", "resnet50", "--results", str(tmp_path)]) == 2
    assert not any(tmp_path.iterdir())


def test_two_batch_sizes_are_the_default_and_the_one_below() -> None:
    assert reference.two_batches("deepspeech2") == [16, 32]
    assert reference.two_batches("resnet50") == [32, 64]


def fake_ncu(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir()
    exe.write_text(f"""#!/bin/sh
case " $* " in
  *" --import "*) cat {FIXTURE} ;;
  *) while [ "$1" != "--export" ]; do shift; done; touch "$2.ncu-rep" ;;
esac
""")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_ncu_pass_merges_fp32_and_tensor_utilization(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", f"{fake_ncu(tmp_path).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(reference, "agent_python", lambda: "python3")
    monkeypatch.setattr(reference, "device_from_env", lambda env: Device("H100", "9.0", 132, 1980.0, "fixture"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "env.json").write_text(json.dumps({"framework": {}}))
    with (run_dir / "kernels.csv").open("w") as f:
        f.write("kernel,calls,total_time_us,time_share,mean_time_us,fp32_utilization,tensor_utilization,method\n"
                "ampere_sgemm_128x64_nn,10,500.0,0.8,50.0,,,trace\nother_kernel,4,125.0,0.2,31.25,,,trace\n")
    spec = specs.build(model="deepspeech2", framework="pytorch", batch_size=4, preset="smoke", device="cpu")
    got = reference.ncu_pass(spec, run_dir, iterations=1, launch_count=10)
    peak = 132 * 1980e6 * 128 * 2
    assert got["fp32_utilization"]["value"] == pytest.approx(100 * (100.35e9 + 6.69e6) / (peak * 2.012e-3), rel=1e-6)
    assert got["fp32_utilization"]["kernels_profiled"] == 4
    assert got["tensor_utilization"]["value"] > 0
    rows = {r["kernel"]: r for r in csv.DictReader((run_dir / "kernels.csv").open())}
    assert float(rows["ampere_sgemm_128x64_nn"]["fp32_utilization"]) == pytest.approx(75.0, abs=0.02)
    assert rows["other_kernel"]["fp32_utilization"] == ""
    assert (run_dir / "ncu_raw.csv").read_text() == FIXTURE.read_text()


def test_ncu_pass_without_ncu_is_null_with_reason(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(reference, "find_ncu", lambda: None)
    spec = specs.build(model="deepspeech2", framework="pytorch", batch_size=4, preset="smoke", device="cpu")
    got = reference.ncu_pass(spec, tmp_path, 1, 10)
    assert got["fp32_utilization"]["value"] is None and "not installed" in got["fp32_utilization"]["reason"]
