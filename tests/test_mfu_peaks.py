"""MFU done right: the peak of the math mode that ran, Blackwell's and FP8's datasheet rows, a GPU missing from
the tables gives null with the reason, and no MFU above 100 % whatever the inputs (torchtitan's users saw 150 %
on a GPU missing from its peak table)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tbdkit.analysis.peak import Device, mfu_metric, peak_flops, peak_metric, product_of


def device(name: str, cc: str = "9.0") -> Device:
    return Device(name, cc, 132, 1980.0, "fixture")


def test_blackwell_and_fp8_rows_from_their_datasheets():
    assert peak_flops(device("NVIDIA H200"), "fp8")[0] == 1979e12
    assert peak_flops(device("NVIDIA H100 80GB HBM3"), "fp8")[0] == 1979e12
    assert peak_flops(device("NVIDIA B200", "10.0"), "bf16")[0] == 2250e12
    assert peak_flops(device("NVIDIA B200", "10.0"), "fp8")[0] == 4500e12
    assert peak_flops(device("NVIDIA GB200", "10.0"), "bf16")[0] == 2500e12
    assert product_of("NVIDIA GB200").name == "GB200" and product_of("NVIDIA B200").name == "B200"
    value, method, _ = peak_flops(device("NVIDIA B200", "10.0"), "fp8")
    assert "HGX B200 datasheet" in method and "fp8 tensor cores" in method
    value, _, reason = peak_flops(device("NVIDIA A100-SXM4-80GB", "8.0"), "fp8")
    assert value is None and "no fp8 tensor cores" in reason


def test_the_peak_follows_the_math_mode_that_ran():
    h100 = device("NVIDIA H100 80GB HBM3")
    rates = {mode: peak_flops(h100, mode)[0] for mode in ("fp32", "tf32", "amp", "bf16", "fp8")}
    assert rates == {"fp32": 67e12, "tf32": 494.5e12, "amp": 989.5e12, "bf16": 989.5e12, "fp8": 1979e12}


def test_a_gpu_missing_from_the_tables_gives_null_with_the_reason():
    peak = peak_metric(device("NVIDIA B300", "10.3"), "bf16")
    assert peak["value"] is None and "compute capability 10.3" in peak["reason"]
    mfu = mfu_metric(1e9, 1e4, peak)
    assert mfu["value"] is None and "no peak FLOP/s" in mfu["reason"]


def test_an_mfu_above_100_percent_is_null_with_the_reason():
    peak = peak_metric(device("NVIDIA H100 80GB HBM3"), "bf16")
    ok = mfu_metric(6e9, 50_000.0, peak)  # 3e14 FLOP/s of 989.5e12
    assert ok["value"] == pytest.approx(100.0 * 3e14 / 989.5e12, rel=1e-6)
    refused = mfu_metric(6e9, 500_000.0, peak)
    assert refused["value"] is None and "impossible" in refused["reason"] and "H100 SXM" in refused["reason"]


@given(st.floats(0, 1e15), st.floats(0, 1e9), st.sampled_from(["fp32", "tf32", "amp", "bf16", "fp8"]),
       st.sampled_from(["NVIDIA H200", "NVIDIA B200", "Tesla T4", "NVIDIA GeForce RTX 4090", "Some GPU"]))
def test_no_mfu_is_ever_above_100_percent(flops_per_work, throughput, mode, name):
    mfu = mfu_metric(flops_per_work, throughput, peak_metric(device(name, "8.9"), mode))
    assert mfu["value"] is None or 0 <= mfu["value"] <= 100, mfu
    assert mfu["value"] is not None or mfu["reason"]


def test_a_mixed_mode_shows_both_peaks():
    """fp8 runs its float8 layers at the FP8 rate and the rest in bf16: MFU against the FP8 peak, and beside it
    against bf16's (torchtitan's "too good to be true" float8 MFU was the bf16 peak alone)."""
    from tbdkit.analysis.peak import MIXED_WITH

    h200 = device("NVIDIA H200")
    mfu = mfu_metric(6e9, 50_000.0, peak_metric(h200, "fp8"), other_peak=peak_metric(h200, MIXED_WITH["fp8"]))
    assert mfu["value"] == pytest.approx(100 * 3e14 / 1979e12, rel=1e-6)
    assert mfu["mfu_other"] == pytest.approx(100 * 3e14 / 989.5e12, rel=1e-6) and mfu["other_peak_flops"] == 989.5e12
