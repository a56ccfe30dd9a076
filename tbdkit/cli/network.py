"""`tbdkit describe` (the network as a framework builds it) and `tbdkit overhead` (the collectors' cost)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from tbdkit.cli.console import console, styled
from tbdkit.core.errors import UserError
from tbdkit.env import stacks
from tbdkit.spec import catalog


def describe(
    model: Annotated[str, typer.Argument(help="model (see `tbdkit list`)")],
    framework: Annotated[str, typer.Option("--framework", "-f", help="pytorch | tensorflow | mxnet")] = "pytorch",
    preset: Annotated[str, typer.Option(help="smoke | paper")] = "smoke",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The network as FRAMEWORK builds it: parameters, per-layer shapes (canonical order), FLOPs per sample."""
    from tbdkit.describe import in_stack

    info = in_stack(model, framework, preset)
    if as_json:
        print(json.dumps(info, indent=2))
        return
    table = Table(title=f"{model} on {framework} {info['framework_version']} ({preset} preset)")
    for col in ("layer", "parameters (canonical layout)", "positions/sample", "forward FLOPs"):
        table.add_column(col)
    for layer in info["layers"]:
        shapes = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in layer["params"].items())
        table.add_row(layer["name"], shapes, f"{layer['positions_per_sample']:,}", f"{layer['forward_flops']:,}")
    console.print(table)
    flops = info["flops_per_sample"]
    ref = flops["reference_sample"]
    console.print(
        f"parameters: {info['parameters']:,}; FLOPs per sample (input {ref['input_shape']}, "
        f"{ref['work']:g} {ref['work_unit']}): "
        f"forward {flops['forward']:,}, training {flops['training']:,}",
        highlight=False,
    )


def overhead(
    model: Annotated[str, typer.Option("--model", "-m")] = "deepspeech2",
    framework: Annotated[str, typer.Option("--framework", "-f")] = "pytorch",
    preset: Annotated[str, typer.Option()] = "smoke",
    rounds: Annotated[int, typer.Option(help="bare/instrumented block pairs")] = 6,
) -> None:
    """Benchmark the collectors' cost: instrumented throughput / bare loop throughput, one run."""
    import subprocess

    from tbdkit.launch.base import parse_event

    m = catalog.get(model)
    catalog.check_framework(m, framework)
    python = stacks.require(framework)
    cmd = [
        str(python),
        "-u",
        "-m",
        "tbdkit.agent.overhead",
        "--model",
        model,
        "--framework",
        framework,
        "--preset",
        preset,
        "--rounds",
        str(rounds),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=stacks.agent_env())
    result = None
    assert proc.stdout is not None
    for line in proc.stdout:
        event = parse_event(line)
        if event and event.get("event") == "overhead":
            result = event
    if proc.wait() != 0 or result is None:
        raise UserError(f"The overhead benchmark failed (exit {proc.returncode}); its messages are above.")
    console.print(
        styled(
            "[bold]collector overhead[/] {}",
            f"{model}/{framework} ({preset}, batch {result['batch_size']}, {result['device']}): bare "
            f"{result['bare_throughput']:.3f}, with collectors {result['collected_throughput']:.3f} {result['unit']} "
            f"over {result['rounds']} alternating rounds of {result['iterations_per_block']} iterations",
        )
    )
    console.print(
        styled(
            "[bold]{}[/]  {}",
            f"ratio (with collectors / bare) = {result['ratio']:.4f}",
            f"(per round: {', '.join(f'{r:.4f}' for r in result['ratio_per_round'])})",
        )
    )
