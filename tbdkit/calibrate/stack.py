"""The GPU probes run where the frameworks are: `python -m tbdkit.calibrate.stack PROBE --index N
[--quick]`, run by a framework stack's own interpreter (like `python -m tbdkit.adapters.probe`),
prints its ProbeResults as one JSON line after MARKER. The kit's environment has no torch, so
`tbdkit calibrate --device cuda:N` runs them here through `gpu_probes`:

- pytorch-gpu (PyTorch stack): NVML utilization, energy and clocks (calibrate.gpu), GPM and the peak
  table on FP32/TF32/BF16 GEMMs (calibrate.flops), the kernel timeline against NVML
  (calibrate.trace), torch.cuda's memory counter (calibrate.gpu_memory);
- ncu around `gemm-range` (PyTorch stack's interpreter under the kit's ncu command: calibrate.flops);
- memory-tensorflow, memory-mxnet: each framework's memory counter in its own stack.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from tbdkit.calibrate.verdict import ProbeResult, Tolerance, unsupported

MARKER = "TBDKIT_CALIBRATION "
TIMEOUT_S = 600.0
# probe -> (stack, instrument, metrics its results cover): named when the probe cannot run at all
PROBES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "pytorch-gpu": (
        "pytorch",
        "pytorch.gpu_probes",
        (
            "gpu_utilization",
            "energy",
            "sm_clock",
            "gpm_fp32_pipe",
            "gpm_tensor_pipe",
            "mfu",
            "gpu_utilization_trace",
            "framework_peak_allocated",
        ),
    ),
    "memory-tensorflow": ("tensorflow", "tensorflow.gpu_memory", ("framework_peak_allocated",)),
    "memory-mxnet": ("mxnet", "mxnet.gpu_memory", ("framework_peak_allocated",)),
}


# --- inside the stack ---------------------------------------------------------------------------


def _identity(index: int) -> tuple[Any, dict[str, str | None], str | None]:
    """The peak table's Device for cuda:`index` (or None and why), and the UUID and PCI bus id that
    name it to NVML."""
    import torch

    from tbdkit.adapters.pytorch import pci_bus_id
    from tbdkit.analysis.peak import Device
    from tbdkit.calibrate.gpu import Nvml

    props = torch.cuda.get_device_properties(index)
    ids = {"uuid": str(getattr(props, "uuid", "")) or None, "pci_bus_id": pci_bus_id(props)}
    try:
        nv = Nvml(index, **ids)
        clock = nv.max_sm_clock()
        nv.close()
    except Exception as exc:
        return None, ids, f"NVML could not report the maximum SM clock ({type(exc).__name__}: {exc})"
    if clock is None:
        return None, ids, "NVML could not report the maximum SM clock"
    return (
        Device(
            props.name,
            f"{props.major}.{props.minor}",
            props.multi_processor_count,
            float(clock),
            "NVML nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)",
        ),
        ids,
        None,
    )


def pytorch_gpu(index: int, quick: bool) -> list[ProbeResult]:
    from tbdkit.calibrate import flops, gpu, gpu_memory, trace

    why = gpu_memory.unavailable("pytorch", index)
    if why:
        return [failed("pytorch-gpu", why)]
    device, ids, why = _identity(index)
    uuid, pci = ids["uuid"], ids["pci_bus_id"]
    out = gpu.probe(index, quick, uuid=uuid, pci_bus_id=pci)
    shape = flops.QUICK_GEMM if quick else flops.GEMM
    for mode in flops.MODES:
        out += flops.gemm_window(f"cuda:{index}", index, mode, shape, 1.0 if quick else 3.0, device, why, uuid, pci)
    out.append(trace.probe(index, quick, uuid=uuid, pci_bus_id=pci))
    out.append(gpu_memory.pytorch_probe(index))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbdkit.calibrate.stack")
    parser.add_argument("probe", choices=[*PROBES, "gemm-range"])
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--mode", default="fp32")
    parser.add_argument("--shape", default="4096,4096,4096")
    args = parser.parse_args(argv)
    if args.probe == "gemm-range":
        from tbdkit.calibrate.flops import profiled_gemm

        m, n, k = (int(x) for x in args.shape.split(","))
        profiled_gemm(f"cuda:{args.index}", args.mode, (m, n, k))
        return 0
    if args.probe == "pytorch-gpu":
        results = pytorch_gpu(args.index, args.quick)
    else:
        from tbdkit.calibrate.gpu_memory import PROBES as MEMORY

        results = [MEMORY[PROBES[args.probe][0]](args.index)]
    print(MARKER + json.dumps({"probes": [r.as_json() for r in results]}), flush=True)
    return 0


# --- on the host --------------------------------------------------------------------------------


def failed(probe: str, why: str) -> ProbeResult:
    stack, instrument, metrics = PROBES[probe]
    return ProbeResult(
        instrument, f"{probe} in the {stack} stack", None, None, "", Tolerance(), unsupported(why), metrics
    )


def parse_output(probe: str, text: str) -> list[ProbeResult]:
    line = next((x for x in reversed(text.splitlines()) if x.startswith(MARKER)), None)
    if line is None:
        return [failed(probe, "the stack's probe printed no result: " + text[-300:].replace("\n", " | "))]
    return [ProbeResult.from_json(p) for p in json.loads(line[len(MARKER) :])["probes"]]


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def run_in_stack(probe: str, index: int, quick: bool, run: Runner = subprocess.run) -> list[ProbeResult]:
    """`probe` in its stack's interpreter; a missing stack or a crash is `unsupported` with the reason."""
    from tbdkit.core.errors import UserError
    from tbdkit.env import stacks

    stack = PROBES[probe][0]
    try:
        python = stacks.require(stack)
    except UserError as exc:
        return [failed(probe, str(exc))]
    cmd = [str(python), "-m", "tbdkit.calibrate.stack", probe, "--index", str(index)] + (["--quick"] if quick else [])
    try:
        proc = run(cmd, capture_output=True, text=True, env=stacks.agent_env(), timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [failed(probe, f"the probe did not finish in {TIMEOUT_S:.0f} s")]
    if proc.returncode != 0:
        return [
            failed(
                probe,
                f"the probe failed (exit {proc.returncode}): "
                + (proc.stdout + proc.stderr)[-300:].replace("\n", " | "),
            )
        ]
    return parse_output(probe, proc.stdout)


def gpu_probes(index: int, quick: bool, run: Runner = subprocess.run) -> list[ProbeResult]:
    """Every GPU probe, each in the interpreter that has its framework."""
    from tbdkit.calibrate import flops
    from tbdkit.env import stacks

    out = run_in_stack("pytorch-gpu", index, quick, run)
    stopped = next((r for r in out if r.instrument == PROBES["pytorch-gpu"][1]), None)
    if stopped is None:  # the PyTorch stack ran and saw the GPU: the ncu pass runs in it too
        out += flops.ncu_probe(stacks.python_of("pytorch"), index, quick, stacks.agent_env(), run=run)
    else:
        out += flops.ncu_probe(
            stacks.python_of("pytorch"), index, quick, {}, run=run, skip=stopped.verdict.removeprefix("unsupported: ")
        )
    out += run_in_stack("memory-tensorflow", index, quick, run)
    out += run_in_stack("memory-mxnet", index, quick, run)
    return out


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
