"""`tbdkit calibrate`: the CLI face of tbdkit.calibrate."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tbdkit.cli.console import console, styled
from tbdkit.core.errors import UserError
from tbdkit.core.paths import default_results_dir


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def calibrate(
    device: Annotated[str, typer.Option("--device", help="cpu, or cuda[:N] to add the GPU probes")] = "cpu",
    quick: Annotated[bool, typer.Option("--quick", help="fewer repeats, under a minute")] = False,
    results: Annotated[Path | None, typer.Option("--results", "-r", help="results folder")] = None,
) -> None:
    """Check each instrument against a workload whose true value is known, on this machine."""
    from tbdkit.calibrate import energy, host, record, steadiness, timing

    if device != "cpu" and not (device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise UserError(f"Device '{device}' is not cpu, cuda or cuda:N: pass e.g. --device cuda:0.")
    results = results or default_results_dir()
    t0 = time.perf_counter()
    probes = []
    with console.status("timing and throughput estimation..."):
        probes += timing.probe(repeats=30 if quick else 200)
    with console.status("CPU utilization, memory..."):
        probes += host.cpu_probe(seconds=1.5 if quick else 5.0)
        probes.append(host.memory_probe(128 if quick else 512))
    with console.status("collector overhead..."):
        probes += host.overhead_probe(rounds=8 if quick else 30, block=100 if quick else 300)
    with console.status("CPU energy (RAPL, through Zeus)..."):
        probes += energy.probe(seconds=1.0 if quick else 3.0)
    with console.status("this machine's steadiness..."):
        steady = steadiness.measure(10.0 if quick else 30.0)
    if device.startswith("cuda"):
        from tbdkit.calibrate import stack

        with console.status("GPU probes (in the framework stacks' interpreters)..."):
            probes += stack.gpu_probes(int(device[5:] or 0) if ":" in device else 0, quick)
    path = record.write(results, device, quick, probes, steady)
    table = Table(title=f"calibration ({device}{', quick' if quick else ''}, {time.perf_counter() - t0:.0f} s)")
    for col in ("instrument", "probe", "expected", "measured", "unit", "verdict"):
        table.add_column(col, overflow="fold")
    for p in probes:
        color = {"trusted": "green", "off": "red"}.get(p.status, "yellow")
        table.add_row(
            p.instrument, p.probe, _fmt(p.expected), _fmt(p.measured), p.unit, styled(f"[{color}]{{}}[/]", p.verdict)
        )
    console.print(table)
    busy = next((p.details for p in probes if "background_load_pct" in p.details), {})
    console.print(
        f"background load (all cores, before the busy probe): {busy.get('background_load_pct', 0):.0f}%",
        highlight=False,
    )
    for p in probes:
        if p.details.get("busy"):
            console.print(f"{p.instrument}: {p.details['busy']}", highlight=False)
    console.print(steadiness.sentence(steady), highlight=False)
    console.print(f"calibration: {path}", highlight=False)
