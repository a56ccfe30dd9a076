"""Eq. 2 (FP32 utilization) and the tensor-pipe share from an Nsight Compute raw CSV fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from tbdkit.analysis import ncu
from tbdkit.analysis.peak import Device, peak_flops

FIXTURE = Path(__file__).parent / "fixtures" / "ncu" / "raw_page.csv"
PEAK = peak_flops(Device("Hopper fixture", "9.0", 132, 1980.0, "fixture"), "fp32")[0]  # by SMs x clock


def test_parse_skips_prof_lines_and_reads_units_and_separators() -> None:
    kernels = ncu.parse_raw_csv(FIXTURE.read_text())
    assert len(kernels) == 4
    assert kernels[0].name == "ampere_sgemm_128x64_nn"
    assert kernels[0].seconds == pytest.approx(1e-3)
    assert kernels[0].fp32_flops == pytest.approx(2 * 16.725e9)
    assert kernels[1].fp32_flops == pytest.approx(6.69e6)
    assert kernels[3].tensor_percent == pytest.approx(90.5)


def test_per_kernel_fp32_utilization_is_eq2() -> None:
    table = ncu.per_kernel(ncu.parse_raw_csv(FIXTURE.read_text()), PEAK)
    sgemm = table["ampere_sgemm_128x64_nn"]
    # (33.45e9 + 66.9e9) FLOPs over 2 ms at 66.908 TFLOP/s
    assert sgemm["fp32_utilization"] == pytest.approx(100 * 100.35e9 / (PEAK * 2e-3), rel=1e-9)
    assert sgemm["fp32_utilization"] == pytest.approx(75.0, abs=0.02)
    add = next(v for k, v in table.items() if "CUDAFunctor_add" in k)
    assert add["fp32_utilization"] == pytest.approx(1.0, abs=0.001)
    assert table["sm90_xmma_gemm_tf32f32_tf32f32_f32_tn_n"] == {"fp32_utilization": 0.0, "tensor_utilization": 90.5}


def test_overall_is_flops_over_peak_times_active_time() -> None:
    got = ncu.overall(ncu.parse_raw_csv(FIXTURE.read_text()), PEAK)
    seconds = 2e-3 + 10e-6 + 2e-6
    assert got["active_seconds"] == pytest.approx(seconds)
    assert got["fp32_utilization"] == pytest.approx(100 * (100.35e9 + 6.69e6) / (PEAK * seconds), rel=1e-9)
    assert got["tensor_utilization"] == pytest.approx(90.5 * 2e-6 / seconds)


def test_rejects_text_without_the_counters() -> None:
    with pytest.raises(ValueError, match="header"):
        ncu.parse_raw_csv("==PROF== nothing profiled\n")
    with pytest.raises(ValueError, match="lacks"):
        ncu.parse_raw_csv('"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n')


def test_time_units_are_converted() -> None:
    text = FIXTURE.read_text().replace('"nsecond"', '"usecond"')
    assert ncu.parse_raw_csv(text)[0].seconds == pytest.approx(1.0)
