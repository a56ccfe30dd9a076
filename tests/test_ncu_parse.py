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


# A constructed kernel timeline (not recorded on a GPU): calls and time per kernel and launch
# configuration over the traced iterations, spelled as torch.profiler names the kernels.
SGEMM, ADD, XMMA = ("ampere_sgemm_128x64_nn",
                    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >",
                    "sm90_xmma_gemm_tf32f32_tf32f32_f32_tn_n")
TIMELINE = [
    ncu.TimelineEntry(SGEMM, "grid=64x8x1 block=256x1x1", 10, 15e-3),
    ncu.TimelineEntry(SGEMM, "grid=32x8x1 block=256x1x1", 2, 1e-3),   # a configuration ncu did not sample
    ncu.TimelineEntry(ADD, "grid=1024x1x1 block=128x1x1", 100, 2e-3),
    ncu.TimelineEntry(XMMA, "grid=132x1x1 block=384x1x1", 5, 2e-3),
]


def test_parse_reads_each_launch_configuration() -> None:
    kernels = ncu.parse_raw_csv(FIXTURE.read_text())
    assert [k.launch for k in kernels[:2]] == ["grid=64x8x1 block=256x1x1", "grid=1024x1x1 block=128x1x1"]


def test_whole_iteration_weights_the_samples_by_the_timeline() -> None:
    """Every launch of a sampled kernel and configuration counts: sgemm's samples hold 33.45e9 and
    66.9e9 FLOPs (mean 50.175e9 per launch) x 10 calls; add's 6.69e6 x 100 calls; xmma none. T is the
    timeline's time of the covered entries (15 + 2 + 2 ms of 20 ms: coverage 95%)."""
    got = ncu.whole_iteration(TIMELINE, ncu.parse_raw_csv(FIXTURE.read_text()), PEAK)
    flops = 10 * 50.175e9 + 100 * 6.69e6
    assert got["fp32_utilization"] == pytest.approx(100 * flops / (PEAK * 19e-3), rel=1e-12)
    assert got["coverage"] == pytest.approx(19 / 20, rel=1e-12)
    assert got["tensor_utilization"] == pytest.approx(90.5 * 2 / 19, rel=1e-12)
    assert (got["timeline_entries"], got["covered_entries"], got["kernels_profiled"]) == (4, 3, 4)
    sgemm = got["per_kernel"][SGEMM]
    assert sgemm["fp32_utilization"] == pytest.approx(100 * 10 * 50.175e9 / (PEAK * 15e-3), rel=1e-12)
    assert sgemm["coverage"] == pytest.approx(15 / 16, rel=1e-12)
    assert got["per_kernel"][ADD]["fp32_utilization"] == pytest.approx(100 * 100 * 6.69e6 / (PEAK * 2e-3), rel=1e-12)
    assert got["per_kernel"][XMMA] == {"fp32_utilization": 0.0, "tensor_utilization": 90.5, "coverage": 1.0}


def test_whole_iteration_is_not_the_first_kernels_alone() -> None:
    """A sampled kernel that runs 100 times per iteration weighs 100 times, unlike eq. 2 over the
    profiled launches alone (which weights by how often ncu happened to catch it)."""
    sampled = ncu.parse_raw_csv(FIXTURE.read_text())
    whole = ncu.whole_iteration(TIMELINE, sampled, PEAK)["fp32_utilization"]
    assert whole != pytest.approx(ncu.overall(sampled, PEAK)["fp32_utilization"], rel=1e-3)


def test_whole_iteration_matches_by_name_where_configurations_are_unknown() -> None:
    timeline = [ncu.TimelineEntry(ADD, "", 4, 40e-6)]
    got = ncu.whole_iteration(timeline, ncu.parse_raw_csv(FIXTURE.read_text()), PEAK)
    assert got["fp32_utilization"] == pytest.approx(100 * 4 * 6.69e6 / (PEAK * 40e-6), rel=1e-12)
    assert got["coverage"] == 1.0
    # a kernel sampled in two configurations cannot be matched by name alone
    two = [k for k in ncu.parse_raw_csv(FIXTURE.read_text())]
    two.append(ncu.KernelCounters(SGEMM, 1e-3, 1e9, 0.0, "grid=1x1x1 block=32x1x1"))
    got = ncu.whole_iteration([ncu.TimelineEntry(SGEMM, "", 3, 3e-3)], two, PEAK)
    assert got["fp32_utilization"] is None and got["coverage"] == 0.0


QUERY = Path(__file__).parent / "fixtures" / "ncu" / "query_metrics.txt"


def test_query_metrics_output_is_parsed_and_a_missing_metric_is_dropped_with_its_reason() -> None:
    names = ncu.parse_query_metrics(QUERY.read_text())
    assert {"gpu__time_duration", "smsp__sass_thread_inst_executed_op_ffma_pred_on", "dram__bytes"} <= names
    assert not any(n.startswith(("-", "Metric", "Device", "were")) for n in names)
    kept, dropped = ncu.choose_metrics(names)
    assert kept == (ncu.FFMA, ncu.FADD, ncu.FMUL, ncu.DURATION)  # full names kept by their base names
    assert list(dropped) == [ncu.TENSOR] and "does not list sm__pipe_tensor_cycles_active" in dropped[ncu.TENSOR]
    assert ncu.choose_metrics(None) == (ncu.METRICS, {})  # no list: every metric asked for, unchecked


def test_the_pass_s_command_line_omits_a_metric_this_gpu_lacks(tmp_path) -> None:
    kept, _ = ncu.choose_metrics(ncu.parse_query_metrics(QUERY.read_text()))
    args = ncu.profile_args("ncu", tmp_path / "profile", 1, kept)
    listed = args[args.index("--metrics") + 1].split(",")
    assert ncu.TENSOR not in listed and set(listed) == set(ncu.REQUIRED)
    assert ncu.query_args("ncu", 0) == ["ncu", "--query-metrics", "--devices", "0"]


def test_a_real_h200_pass_matches_the_timeline_s_kernels_across_the_two_profilers_spellings() -> None:
    """ResNet-50 fp32 on an H200 (the kit's first GPU run): Nsight Compute's raw page and torch.profiler's
    launches of the same iteration. ncu's demangler spells templated kernels its own way (`detail::dgrad_engine
    <..., 0>` for `cudnn::detail::dgrad_engine<..., false>`, `const float2` for `float2 const`, no enum casts):
    compared as spelled, its samples covered 22.8% of the kernel time. Every kernel ncu sampled but one
    (wgrad_alg1_engine, an algorithm only ncu's process chose) is found in the timeline; the rest of the
    timeline's time is launches ncu's process did not make (cuDNN autotunes in each process)."""
    import gzip

    from tbdkit.analysis.timeline import loose_name
    from tbdkit.bench.reference import read_timeline

    folder = Path(__file__).parent / "fixtures" / "h200-resnet50"
    sampled = ncu.parse_raw_csv(gzip.decompress((folder / "ncu_raw.csv.gz").read_bytes()).decode())
    timeline = read_timeline(folder / "kernel_launches.csv")
    assert len(sampled) == 134
    names = {loose_name(e.name) for e in timeline}
    assert [k.name.split("(")[0] for k in sampled if loose_name(k.name) not in names] == [
        "void cnn::wgrad_alg1_engine<float, float, 128, 6, 7, 3, 3, 5, 0, 0>"
    ]
    got = ncu.whole_iteration(timeline, sampled, 67e12)  # the H200's FP32 peak at its max SM clock
    assert got["coverage"] > 0.76 and got["kernels_profiled"] == 134
    assert 30.0 < got["fp32_utilization"] < 60.0
