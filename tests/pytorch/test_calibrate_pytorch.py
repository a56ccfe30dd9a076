"""The calibration's GPU probes in the PyTorch stack on this GPU-less machine: the GEMM window's GPM
reading through the real pynvml over a stand-in libnvidia-ml (tests/nvml_shim.py) with real torch
GEMMs on the CPU, and the memory probe and the stack entry point saying why they cannot measure."""

from __future__ import annotations

import json

import pynvml
import torch

from nvml_shim import Device, fake_nvml  # noqa: F401  (fixture)
from tbdkit.analysis.peak import Device as PeakDevice
from tbdkit.calibrate import flops, gpu_memory, stack

H100 = PeakDevice("NVIDIA H100 80GB HBM3", "9.0", 132, 1980.0, "constructed")


def test_gemm_window_reads_gpm_through_the_real_wrappers(fake_nvml):
    fake_nvml([Device("GPU-58f4c2a0-0000-0000-0000-000000000001", "00000000:18:00.0")])
    busy, idle, peak = flops.gemm_window("cpu", 0, "fp32", (64, 64, 64), 0.05, H100)
    # the stand-in's metric k between two samples is k x (their counter difference): start 1, end 3
    assert busy.details["fp32_pipe_pct"] == pynvml.NVML_GPM_METRIC_FP32_UTIL * 2
    assert busy.details["tensor_pipe_pct"] == pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL * 2
    # 24% FP32 and 10% tensor pipe is not what an SGEMM does: each pipe's probe says so of its own metric
    assert (busy.status, busy.metrics) == ("off", ("gpm_fp32_pipe",))
    assert (idle.status, idle.metrics) == ("off", ("gpm_tensor_pipe",))
    assert peak.status == "trusted" and 0 < peak.measured < peak.expected and peak.details["gemms"] >= 10
    assert not torch.backends.cuda.matmul.allow_tf32


def test_gemm_window_without_gpm_is_unsupported(fake_nvml):
    fake_nvml([Device("GPU-58f4c2a0-0000-0000-0000-000000000001", "00000000:18:00.0", gpm=False)])
    busy, idle, _ = flops.gemm_window("cpu", 0, "bf16", (32, 32, 32), 0.02, H100)
    assert busy.status == idle.status == "unsupported" and "GPM" in busy.verdict


def test_torch_memory_probe_says_why_on_cpu():
    r = gpu_memory.pytorch_probe(0)
    assert r.status == "unsupported" and "PyTorch" in r.verdict and r.metrics == ("framework_peak_allocated",)


def test_stack_entry_point_prints_its_results(capsys):
    assert stack.main(["pytorch-gpu", "--index", "0", "--quick"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(stack.MARKER)
    probes = json.loads(line[len(stack.MARKER):])["probes"]
    assert [p["status"] for p in probes] == ["unsupported"] and "gpu_utilization" in probes[0]["metrics"]
