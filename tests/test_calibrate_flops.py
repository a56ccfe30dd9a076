"""The GPU probes added to `tbdkit calibrate`: ncu and GPM against GEMM FLOP counts, the peak table,
the kernel timeline against NVML, the frameworks' memory counters, and running them in the framework
stacks. This machine has no GPU: every reading below is CONSTRUCTED by the test (labelled so), ncu's
text is constructed in its raw-page CSV layout (the header and units rows of
tests/fixtures/ncu/raw_page.csv), and each probe's verdict is shown turning `off` when its
instrument is deliberately biased."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tbdkit.env import stacks
from tbdkit.analysis import timeline
from tbdkit.analysis.peak import Device
from tbdkit.calibrate import flops, gpu_memory, record, stack, trace
from tbdkit.calibrate.verdict import ProbeResult, Tolerance

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "ncu" / "raw_page.csv"
M = N = K = 4096
H100 = Device("NVIDIA H100 80GB HBM3", "9.0", 132, 1980.0, "constructed")


def constructed_csv(rows: list[tuple[str, int, float, int, int, int]]) -> str:
    """ncu's raw page (==PROF== lines, header, units row) with constructed rows:
    (kernel, duration ns, tensor %, FADD, FFMA, FMUL) thread instructions."""
    lines = FIXTURE.read_text().splitlines()
    head = lines[: next(i for i, x in enumerate(lines) if x.startswith('"ID"')) + 2]
    body = [",".join(f'"{v}"' for v in (i, 4242, "python3.11", "gpu-host", name, 1, 7, "(256, 1, 1)", "(32, 32, 1)", 0,
                                            "9.0", f"{ns:,}", tensor, f"{fadd:,}", f"{ffma:,}", f"{fmul:,}"))
            for i, (name, ns, tensor, fadd, ffma, fmul) in enumerate(rows)]
    return "\n".join(head + body) + "\n"


# An SGEMM of 4096^3: M*N*K FFMA thread instructions, alpha scaling M*N FMUL (constructed).
SGEMM = ("sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3", 2_500_000, 0.0, 0, M * N * K, M * N)
TF32 = ("sm90_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize128x256x32", 400_000, 86.0, 0, 0, M * N)


def test_ncu_sgemm_flops_equal_2mnk_on_constructed_csv():
    r = flops.ncu_result_from_csv("fp32", M, N, K, constructed_csv([SGEMM]))
    assert r.status == "trusted", r.verdict
    assert r.expected == 2 * M * N * K and r.measured == pytest.approx(2 * M * N * K * (1 + 1 / (2 * K)))


def test_ncu_sgemm_off_when_the_counter_is_biased():
    half = (SGEMM[0], SGEMM[1], 0.0, 0, M * N * K // 2, 0)  # an FFMA counter that misses half the launches
    assert flops.ncu_result_from_csv("fp32", M, N, K, constructed_csv([half])).status == "off"
    tensor_on = (*SGEMM[:2], 35.0, *SGEMM[3:])  # a tensor pipe busy in a TF32-off SGEMM
    r = flops.ncu_result_from_csv("fp32", M, N, K, constructed_csv([tensor_on]))
    assert r.status == "off" and "tensor pipe" in r.verdict


def test_ncu_tf32_gemm_tensor_pipe_high_fp32_low_on_constructed_csv():
    assert flops.ncu_result_from_csv("tf32", M, N, K, constructed_csv([TF32])).status == "trusted"
    dead = (*TF32[:2], 0.0, *TF32[3:])  # a tensor-pipe metric stuck at 0
    assert flops.ncu_result_from_csv("tf32", M, N, K, constructed_csv([dead])).status == "off"
    assert flops.ncu_result_from_csv("tf32", M, N, K, "==PROF== nothing\n").status == "unsupported"


def _gpm(fp32: float | None, tensor: float | None) -> dict:
    def m(v: float | None) -> dict:
        return {"value": v, "unit": "%", "reason": None if v is not None else "constructed: not supported"}
    return {"gpm_fp32_pipe": m(fp32), "gpm_tensor_pipe": m(tensor)}


def _statuses(results: list[ProbeResult]) -> dict[str, str]:
    return {m: r.status for r in results for m in r.metrics}


def test_gpm_pipes_on_constructed_readings():
    shape = (M, N, K)
    both = {"gpm_fp32_pipe": "trusted", "gpm_tensor_pipe": "trusted"}
    assert _statuses(flops.gpm_results("fp32", shape, _gpm(78.0, 0.0))) == both
    assert _statuses(flops.gpm_results("tf32", shape, _gpm(1.0, 65.0))) == both
    assert _statuses(flops.gpm_results("bf16", shape, _gpm(0.5, 70.0))) == both
    # biased: GPM's FP32 and tensor ids swapped, as a wrong metric id would: both readings are off
    swapped = {"gpm_fp32_pipe": "off", "gpm_tensor_pipe": "off"}
    assert _statuses(flops.gpm_results("fp32", shape, _gpm(0.0, 78.0))) == swapped
    assert _statuses(flops.gpm_results("tf32", shape, _gpm(65.0, 1.0))) == swapped
    assert set(_statuses(flops.gpm_results("fp32", shape, _gpm(None, None))).values()) == {"unsupported"}


def test_a_pipe_read_high_where_it_should_idle_condemns_that_pipe_alone():
    """The H200's readings (tests/fixtures/h200-calibration): in the TF32 window GPM's tensor pipe read
    60% and its FP32 pipe 9.7%, while ncu counted 0.05% of 2MNK as FP32 FLOPs in the same kernel. The
    FP32 pipe's reading is off (it is not FP32 math alone); the tensor pipe's is right, and was judged
    off with it."""
    cal = json.loads((FIXTURES / "h200-calibration" / "calibration.json").read_text())
    gpm = {p["probe"].split()[0].lower(): p["details"] for p in cal["probes"] if p["instrument"].startswith("gpm.")}
    ncu_tf32 = next(p for p in cal["probes"] if p["instrument"] == "ncu.tensor_pipe")
    assert ncu_tf32["details"]["fp32_share"] < 0.001  # the GEMM did (almost) no FP32 math
    results = []
    for mode in flops.MODES:
        got = _gpm(gpm[mode]["fp32_pipe_pct"], gpm[mode]["tensor_pipe_pct"])
        results += flops.gpm_results(mode, flops.QUICK_GEMM, got)
    verdicts = record.instrument_verdicts([r.as_json() for r in results])
    assert verdicts == {"gpm_fp32_pipe": "off", "gpm_tensor_pipe": "trusted"}
    (off,) = [r for r in results if r.status == "off"]
    assert off.measured == gpm["tf32"]["fp32_pipe_pct"] and "integer multiply-adds" in off.verdict


def test_peak_table_on_constructed_rates():
    assert flops.peak_result("fp32", H100, 51e12).status == "trusted"
    r = flops.peak_result("fp32", H100, 80e12)  # above the 67 TFLOP/s datasheet figure: the table is wrong
    assert r.status == "off" and "peak table is wrong for this SKU" in r.verdict
    assert flops.peak_result("bf16", H100, 700e12).status == "trusted"   # BF16 held against the FP16 tensor peak
    assert flops.peak_result("tf32", Device("Tesla V100-SXM2-16GB", "7.0", 80, 1530.0, "c"), 1e12).status == "unsupported"


def _duty_trace(period_us: float, periods: int, busy_share: float) -> dict:
    """A constructed Chrome trace: one kernel per period, busy for busy_share of it."""
    events = [{"ph": "X", "cat": "kernel", "name": "spin", "ts": i * period_us, "dur": busy_share * period_us}
              for i in range(periods)]
    events.append({"ph": "X", "cat": "cpu_op", "name": "end", "ts": periods * period_us - 1, "dur": 1})
    return {"traceEvents": events}


def test_kernel_timeline_against_nvml_on_constructed_trace():
    kernels, span = timeline.from_chrome_trace(_duty_trace(100_000, 40, 0.5))
    util = timeline.utilization(kernels, span)
    nvml = [100, 0] * 20  # constructed NVML samples of the same window
    assert trace.timeline_result(util, nvml, 50.0, 4.0).status == "trusted"
    # biased: a timeline that stretches each kernel to its whole period (e.g. launch to completion)
    kernels, span = timeline.from_chrome_trace(_duty_trace(100_000, 40, 1.0))
    r = trace.timeline_result(timeline.utilization(kernels, span), nvml, 50.0, 4.0)
    assert r.status == "off"
    assert trace.timeline_result(util, [], None, 4.0).status == "unsupported"


def test_memory_counter_on_constructed_readings():
    mib = gpu_memory.MIB
    assert gpu_memory.memory_result("pytorch", 256, 256 * mib + 512).status == "trusted"
    assert gpu_memory.memory_result("tensorflow", 256, 128 * mib).status == "off"   # a counter reporting half
    assert gpu_memory.memory_result("mxnet", 256, None, "constructed: no GPU").status == "unsupported"


def test_probe_results_cross_the_interpreter_boundary():
    r = ProbeResult("gpm.fp32_pipe", "constructed", 40.0, 77.5, "%", Tolerance(0.01, 2.0), "trusted",
                    ("gpm_fp32_pipe",), {"rule": "x"})
    text = "TF noise on stdout\n" + stack.MARKER + '{"probes": [' + __import__("json").dumps(r.as_json()) + "]}\n"
    assert stack.parse_output("pytorch-gpu", text) == [r]
    gap = stack.parse_output("memory-mxnet", "Segmentation fault\n")
    assert gap[0].status == "unsupported" and "Segmentation fault" in gap[0].verdict


def test_a_missing_stack_is_unsupported_with_its_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path))
    r = stack.run_in_stack("memory-tensorflow", 0, quick=True)
    assert [x.status for x in r] == ["unsupported"] and "tbdkit setup tensorflow" in r[0].verdict


@pytest.mark.skipif(not stacks.is_installed("mxnet"), reason="the MXNet stack is not installed")
def test_mxnet_memory_probe_runs_in_its_stack_and_says_why_on_cpu():
    """For real: the MXNet stack's interpreter, MXNet's own GPU probe, on a machine without a GPU."""
    r = stack.run_in_stack("memory-mxnet", 0, quick=True)
    assert len(r) == 1 and r[0].instrument == "mxnet.gpu_memory"
    assert r[0].status == "unsupported" and "MXNet" in r[0].verdict


def _stand_in_ncu(tmp_path: Path, csv_text: str, fail: str | None = None) -> str:
    """An executable in ncu's place (this machine has no GPU to profile): it records its arguments,
    writes the report file --export names, and prints `csv_text` on --import."""
    (tmp_path / "raw.csv").write_text(csv_text)
    script = tmp_path / "ncu"
    script.write_text(f"""#!{sys.executable}
import sys, pathlib
args = sys.argv[1:]
d = pathlib.Path({str(tmp_path)!r})
if "--import" in args:
    print((d / "raw.csv").read_text())
    raise SystemExit(0)
(d / "args.txt").write_text("\\n".join(args))
{"print(" + repr(fail) + "); raise SystemExit(1)" if fail else "pass"}
pathlib.Path(args[args.index("--export") + 1] + ".ncu-rep").write_text("report")
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_ncu_probe_runs_the_kits_ncu_command_around_the_stack(tmp_path):
    exe = _stand_in_ncu(tmp_path, constructed_csv([SGEMM]))
    got = flops.ncu_probe(Path("/stack/bin/python"), 0, quick=False, env=dict(os.environ), exe=exe)
    assert got[0].instrument == "ncu.fp32_flops" and got[0].status == "trusted"
    args = (tmp_path / "args.txt").read_text().splitlines()  # the last pass: the TF32 GEMM
    assert args[args.index("--profile-from-start") + 1] == "off"
    assert set(args[args.index("--metrics") + 1].split(",")) == set(flops.ncu.METRICS)
    assert args[-10:] == ["/stack/bin/python", "-m", "tbdkit.calibrate.stack", "gemm-range", "--index", "0",
                          "--mode", "tf32", "--shape", "4096,4096,4096"]
    assert got[1].instrument == "ncu.tensor_pipe" and got[1].status == "off"  # the SGEMM's CSV shows no tensor pipe


def test_ncu_probe_says_why_when_the_counters_are_locked(tmp_path):
    exe = _stand_in_ncu(tmp_path, "", fail="==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    got = flops.ncu_probe(Path("/stack/bin/python"), 0, quick=True, env=dict(os.environ), exe=exe)
    assert [r.status for r in got] == ["unsupported", "unsupported"] and "ERR_NVGPUCTRPERM" in got[0].verdict


def test_gpu_probes_without_stacks_say_why_for_every_instrument(tmp_path, monkeypatch):
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path))
    got = {r.instrument: r for r in stack.gpu_probes(0, quick=True)}
    assert set(got) == {"pytorch.gpu_probes", "ncu.fp32_flops", "ncu.tensor_pipe", "tensorflow.gpu_memory",
                        "mxnet.gpu_memory"}
    assert all(r.status == "unsupported" for r in got.values())
    assert "tbdkit setup pytorch" in got["ncu.fp32_flops"].verdict  # ncu needs the PyTorch stack's GEMM
    assert "tensor_utilization" in got["ncu.tensor_pipe"].metrics
