"""The analyses' arithmetic on fixtures: peak FLOP/s from device properties, MFU, the memory
breakdown's attribution, and the kernel timeline (eq. 1 and the per-kernel table)."""

from __future__ import annotations

import pytest

from tbdkit.analysis import memory
from tbdkit.analysis.peak import Device, mfu_metric, peak_flops, peak_metric
from tbdkit.analysis.timeline import Kernel, busy_time, kernel_table, merge_utilization, utilization

H100_SXM = Device("NVIDIA H100 80GB HBM3", "9.0", 132, 1980.0, "fixture")
A100_SXM = Device("NVIDIA A100-SXM4-40GB", "8.0", 108, 1410.0, "fixture")


def test_h100_fp32_peak_is_the_datasheet_67_tflops() -> None:
    value, method, reason = peak_flops(H100_SXM, "fp32")
    assert reason is None
    assert value == pytest.approx(66.9e12, rel=0.002)
    assert "H100 SXM" in method and "datasheet" in method
    # a GPU not in the product table: SMs x clock x lanes of its compute capability
    value, method, _ = peak_flops(Device("Some Hopper", "9.0", 132, 1980.0, "fixture"), "fp32")
    assert value == pytest.approx(66.9e12, rel=0.002) and "132 SMs" in method and "128 FP32" in method


# Published dense peaks, TFLOP/s (fp32 CUDA cores, tf32 tensor, fp16 tensor, bf16 tensor: each datasheet's
# "with sparsity" figure halved), of each GPU as NVML names it, with the SM count and max clock it reports:
# the product, not the compute capability, decides. Volta and Turing have no bf16 tensor math.
PUBLISHED = [
    ("Tesla V100-SXM2-16GB", "7.0", 80, 1530, 15.7, None, 125, None),
    ("Tesla V100-PCIE-32GB", "7.0", 80, 1380, 14.0, None, 112, None),
    ("Tesla T4", "7.5", 40, 1590, 8.1, None, 65, None),
    ("NVIDIA A10", "8.6", 72, 1695, 31.2, 62.5, 125, 125),
    ("NVIDIA A100-SXM4-80GB", "8.0", 108, 1410, 19.5, 156, 312, 312),
    ("NVIDIA A100 80GB PCIe", "8.0", 108, 1410, 19.5, 156, 312, 312),
    ("NVIDIA L4", "8.9", 58, 2040, 30.3, 60, 121, 121),
    ("NVIDIA L40S", "8.9", 142, 2520, 91.6, 183, 362, 362),
    ("NVIDIA H100 80GB HBM3", "9.0", 132, 1980, 67, 494.7, 989.4, 989.4),
    ("NVIDIA H100 PCIe", "9.0", 114, 1755, 51, 378, 756, 756),
    ("NVIDIA H200", "9.0", 132, 1980, 67, 494.7, 989.4, 989.4),
]


@pytest.mark.parametrize("name, cc, sms, clock, fp32, tf32, fp16, bf16", PUBLISHED)
def test_peak_table_matches_the_published_dense_peaks(name, cc, sms, clock, fp32, tf32, fp16, bf16) -> None:
    device = Device(name, cc, sms, float(clock), "fixture")
    for mode, tflops in (("fp32", fp32), ("tf32", tf32), ("amp", fp16), ("bf16", bf16)):
        value, method, reason = peak_flops(device, mode)
        if tflops is None:
            assert value is None and f"no {mode} tensor math" in reason
        else:
            assert value == pytest.approx(tflops * 1e12, rel=0.003), (name, mode)
            assert "datasheet" in method and "nvidia" in method.lower()


def test_products_sharing_a_compute_capability_are_told_apart() -> None:
    from tbdkit.analysis.peak import product_of

    assert product_of("NVIDIA A10G") is None  # AWS's A10G is not the A10 (no NVIDIA datasheet of its own)
    assert product_of("NVIDIA L40S").name == "L40S" and product_of("NVIDIA L40").name == "L40"
    assert product_of("NVIDIA L4").name == "L4"
    geforce = peak_flops(Device("NVIDIA GeForce RTX 4090", "8.9", 128, 2520.0, "fixture"), "amp")
    assert "GeForce rate" in geforce[1]


def test_a100_peaks_match_the_datasheet() -> None:
    assert peak_flops(A100_SXM, "fp32")[0] == pytest.approx(19.5e12, rel=0.002)
    assert peak_flops(A100_SXM, "tf32")[0] == pytest.approx(156e12, rel=0.002)
    assert peak_flops(A100_SXM, "amp")[0] == pytest.approx(312e12, rel=0.002)


def test_h100_tensor_peaks_scale_with_the_clock() -> None:
    # NVIDIA quotes 989.4 TFLOP/s dense FP16 and BF16 at the 1830 MHz tensor boost clock
    at_1830 = Device("H100", "9.0", 132, 1830.0, "fixture")
    assert peak_flops(at_1830, "amp")[0] == pytest.approx(989.4e12, rel=0.002)
    assert peak_flops(at_1830, "bf16")[0] == pytest.approx(989.4e12, rel=0.002)
    assert peak_flops(at_1830, "tf32")[0] == pytest.approx(494.7e12, rel=0.002)
    turing = peak_flops(Device("Some Turing", "7.5", 40, 1590.0, "fixture"), "bf16")
    assert turing[0] is None and "no dense bf16 tensor rate" in turing[2]


def test_bf16_is_refused_below_compute_capability_8_in_one_sentence() -> None:
    from tbdkit.analysis.peak import bf16_refusal

    assert bf16_refusal("NVIDIA A100-SXM4-80GB", (8, 0)) is None and bf16_refusal("NVIDIA H100", (9, 0)) is None
    for name, cc in (("Tesla V100-SXM2-16GB", (7, 0)), ("Tesla T4", (7, 5))):
        sentence = bf16_refusal(name, cc)
        assert sentence is not None and f"{name} is {cc[0]}.{cc[1]}" in sentence and "--precision amp" in sentence
        assert sentence.count(". ") == 0


def test_unknown_architecture_is_null_with_reason() -> None:
    volta = Device("V100", "7.0", 80, 1530.0, "fixture")
    m = peak_metric(volta, "tf32")
    assert m["value"] is None and "tf32" in m["reason"]
    assert peak_metric(None, "fp32", "the run is on the CPU")["reason"] == "the run is on the CPU"


def test_mfu_is_model_flops_times_throughput_over_peak() -> None:
    peak = peak_metric(H100_SXM, "fp32")
    m = mfu_metric(3 * 4.1e9 * 2, 1000.0, peak)   # ResNet-50: ~24.6 GFLOP per image trained, 1000 img/s
    assert m["unit"] == "%"
    assert m["value"] == pytest.approx(100 * 24.6e12 / 66.9e12, rel=0.003)
    assert mfu_metric(None, 1000.0, peak, "not counted")["reason"] == "not counted"
    assert "peak" in mfu_metric(1.0, 1.0, peak_metric(None, "fp32", "cpu"))["reason"]


def _cats(**bytes_: int | None) -> dict:
    return {c: memory.entry(bytes_.get(c), "fixture", None if bytes_.get(c) is not None else "unmeasured")
            for c in memory.CATEGORIES}


def test_memory_breakdown_sums_to_the_peak() -> None:
    doc = memory.breakdown("cuda:0", _cats(weights=100, weight_gradients=100, feature_maps=600, dynamic=100),
                           memory.entry(1000, "fixture"))
    assert doc["unattributed"]["bytes"] == 100
    total = sum(c["bytes"] or 0 for c in doc["categories"].values()) + doc["unattributed"]["bytes"]
    assert total == doc["peak"]["bytes"]
    assert memory.shares(doc)["feature_maps"] == pytest.approx(0.6)
    assert doc["categories"]["workspace"]["reason"] == "unmeasured"


def test_memory_breakdown_without_peak_leaves_unattributed_null() -> None:
    doc = memory.breakdown("cpu", _cats(weights=1), memory.entry(None, "fixture", "no allocator"))
    assert doc["unattributed"]["bytes"] is None and "no allocator" in doc["unattributed"]["reason"]
    assert memory.shares(doc)["weights"] is None


def test_memory_breakdown_requires_every_category() -> None:
    cats = _cats(weights=1)
    del cats["dynamic"]
    with pytest.raises(ValueError, match="dynamic"):
        memory.breakdown("cpu", cats, memory.entry(1, "fixture"))
    with pytest.raises(ValueError):
        memory.entry(None, "fixture")


# Two streams: a [0,10) and b [5,15) overlap; c [20,25) alone; d has zero length. Elapsed 40 us.
TRACE = [Kernel("a", 0, 10), Kernel("b", 5, 10), Kernel("c", 20, 5), Kernel("d", 30, 0), Kernel("a", 12, 2)]


def test_busy_time_is_the_union_of_kernel_intervals() -> None:
    assert busy_time(TRACE) == pytest.approx(20.0)  # [0,15) + [20,25)
    assert busy_time([]) == 0.0
    assert utilization(TRACE, 40.0) == pytest.approx(50.0)
    with pytest.raises(ValueError):
        utilization(TRACE, 0.0)


def test_kernel_table_orders_by_total_time_with_shares() -> None:
    rows = kernel_table(TRACE, "fixture")
    assert [r["kernel"] for r in rows] == ["a", "b", "c", "d"]
    a = rows[0]
    assert (a["calls"], a["total_time_us"], a["mean_time_us"]) == (2, 12.0, 6.0)
    assert a["time_share"] == pytest.approx(12 / 27, abs=1e-6)
    assert sum(r["time_share"] for r in rows) == pytest.approx(1.0, abs=1e-5)
    assert a["fp32_utilization"] == "" and a["tensor_utilization"] == ""


def test_merge_fills_ncu_utilization_by_kernel_name() -> None:
    rows = merge_utilization(kernel_table(TRACE, "trace"), {"b": {"fp32_utilization": 42.0, "tensor_utilization": None}},
                             "ncu")
    b = next(r for r in rows if r["kernel"] == "b")
    assert b["fp32_utilization"] == 42.0 and b["tensor_utilization"] == "" and b["method"] == "trace; ncu"
    assert next(r for r in rows if r["kernel"] == "a")["fp32_utilization"] == ""


def test_kernels_from_a_torch_profiler_chrome_trace() -> None:
    """Fixture in the layout of torch.profiler's export_chrome_trace (hand-written, see its events):
    CPU span 1000-1030, kernels 1010-1050 and 1040-1060 on two streams and 1080-1100, a memcpy
    1070-1080 that is not a kernel; the trace spans 1000-1100."""
    import json
    from pathlib import Path

    from tbdkit.analysis.timeline import from_chrome_trace

    doc = json.loads((Path(__file__).parent / "fixtures" / "trace" / "torch_profiler_trace.json").read_text())
    kernels, elapsed = from_chrome_trace(doc)
    assert elapsed == pytest.approx(100.0)
    assert [k.name for k in kernels] == ["ampere_sgemm_128x64_nn", "void at::native::vectorized_elementwise_kernel<4>",
                                         "ampere_sgemm_128x64_nn"]
    assert kernels[0].start_us == pytest.approx(10.0)
    assert utilization(kernels, elapsed) == pytest.approx(70.0)   # [10,60) + [80,100)
    assert from_chrome_trace({"traceEvents": []}) == ([], 0.0)


def test_merge_matches_names_that_differ_only_in_parameters_and_spacing() -> None:
    trace_name = "void at::native::elementwise_kernel<128, 4, at::native::Fill<float> >(int, at::native::Fill<float>)"
    ncu_name = "void at::native::elementwise_kernel<128,4,at::native::Fill<float>>(int, Fill<float>)"
    rows = kernel_table([Kernel(trace_name, 0, 5), Kernel("other", 5, 5)], "trace")
    merged = merge_utilization(rows, {ncu_name: {"fp32_utilization": 12.5, "tensor_utilization": 0.0}}, "ncu")
    got = {r["kernel"]: r for r in merged}
    assert got[trace_name]["fp32_utilization"] == 12.5 and got["other"]["fp32_utilization"] == ""
    # two ncu kernels with the same loose name: ambiguous, left unfilled
    twins = {ncu_name: {"fp32_utilization": 1.0}, ncu_name + " ": {"fp32_utilization": 2.0}}
    assert next(r for r in merge_utilization(rows, twins, "ncu") if r["kernel"] == trace_name)["fp32_utilization"] == ""


def test_kernel_launch_configurations_from_a_torch_profiler_trace() -> None:
    """torch.profiler (Kineto) writes a kernel's grid and block as args "grid": [x, y, z] and
    "block": [x, y, z]; Nsight Compute's CSV as "(x, y, z)": both spell one configuration."""
    from tbdkit.analysis.timeline import from_chrome_trace, launch_config, launch_table

    doc = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 0.0, "dur": 4.0, "args": {"grid": [64, 8, 1], "block": [256, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 5.0, "dur": 2.0, "args": {"grid": [32, 8, 1], "block": [256, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 8.0, "dur": 6.0, "args": {"grid": [64, 8, 1], "block": [256, 1, 1]}},
    ]}
    kernels, _ = from_chrome_trace(doc)
    assert kernels[0].launch == launch_config("(64, 8, 1)", "(256, 1, 1)") == "grid=64x8x1 block=256x1x1"
    rows = launch_table(kernels, "fixture")
    assert [(r["launch"], r["calls"], r["total_time_us"]) for r in rows] == [
        ("grid=64x8x1 block=256x1x1", 2, 10.0), ("grid=32x8x1 block=256x1x1", 1, 2.0)]
    assert launch_config(None, [1, 1, 1]) == ""


def test_category_shares_are_over_all_five_categories() -> None:
    e = memory.entry
    cats = {"weights": e(100, "m"), "weight_gradients": e(100, "m"), "feature_maps": e(600, "m"),
            "workspace": e(150, "m"), "dynamic": e(50, "m")}
    doc = memory.breakdown("cuda:0", cats, e(1200, "m"))
    assert doc["category_shares"]["values"] == {"weights": 0.1, "weight_gradients": 0.1, "feature_maps": 0.6,
                                                "workspace": 0.15, "dynamic": 0.05}
    cats["workspace"] = e(None, "m", "not separable here")
    shares = memory.breakdown("cuda:0", cats, e(1200, "m"))["category_shares"]
    # 600 / 850 of the measured four would read 71%: never a share of the measured ones alone
    assert shares["values"] is None and "workspace (not separable here)" in shares["reason"]
