"""`tbdkit describe` (the network as a framework builds it) and `tbdkit overhead` (the collectors' cost)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from tbdkit.cli.common import WorkloadsOpt, use_workloads
from tbdkit.cli.console import console, styled
from tbdkit.core.errors import UserError
from tbdkit.env import stacks
from tbdkit.spec import catalog


def describe(
    model: Annotated[str, typer.Argument(help="model (see `tbdkit list`)")],
    framework: Annotated[str, typer.Option("--framework", "-f", help="pytorch | tensorflow | mxnet")] = "pytorch",
    preset: Annotated[str, typer.Option(help="smoke | paper")] = "smoke",
    as_json: Annotated[bool, typer.Option("--json")] = False,
    workloads: WorkloadsOpt = None,
) -> None:
    """The network as FRAMEWORK builds it: parameters, per-layer shapes (canonical order), FLOPs per sample."""
    use_workloads(workloads)
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
    target_ci: Annotated[
        float, typer.Option(help="stop once the ratio's 95% half-width is below this fraction", min=0.0001, max=0.5)
    ] = 0.005,
    min_rounds: Annotated[int, typer.Option(help="bare/instrumented block pairs at least", min=2)] = 6,
    max_rounds: Annotated[int, typer.Option(help="bare/instrumented block pairs at most", min=2)] = 30,
    max_s: Annotated[float, typer.Option(help="no new round after this many seconds", min=1)] = 300.0,
    workloads: WorkloadsOpt = None,
) -> None:
    """Benchmark the collectors' cost: instrumented throughput / bare loop throughput with its 95%
    interval over paired rounds, run until the interval is narrow enough or a cap."""
    use_workloads(workloads)
    import subprocess

    from tbdkit.launch.base import parse_event

    if min_rounds > max_rounds:
        raise UserError(
            f"--min-rounds {min_rounds} is above --max-rounds {max_rounds}: give a minimum no larger than the cap."
        )
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
        "--target-ci",
        str(target_ci),
        "--min-rounds",
        str(min_rounds),
        "--max-rounds",
        str(max_rounds),
        "--max-s",
        str(max_s),
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
    for shown in overhead_lines(model, framework, preset, result):
        console.print(shown)


def overhead_lines(model: str, framework: str, preset: str, result: dict[str, object]) -> list[Text]:
    """What `tbdkit overhead` prints from the agent's `overhead` event."""
    r: dict[str, Any] = dict(result)
    stops = {
        "target": f"its half-width reached the {r['target_half_width']:.1%} target",
        "max_rounds": "the cap on rounds",
        "time_cap": "the cap on seconds",
    }
    ci = r["ratio_ci95"]
    interval = f"95% CI {ci[0]:.4f}-{ci[1]:.4f} (±{r['half_width']:.2%})" if ci else "no interval (one round)"
    verdict = r["verdict"][:1].upper() + r["verdict"][1:]
    lines = [
        styled(
            "[bold]collector overhead[/] {}",
            f"{model}/{framework} ({preset}, batch {r['batch_size']}, {r['device']}): "
            f"bare {r['bare_throughput']:.3f}, with collectors {r['collected_throughput']:.3f} {r['unit']}, "
            f"{r['rounds']} paired rounds of {r['iterations_per_block']} iterations a block, "
            f"stopped at {stops.get(r['stop_reason'], r['stop_reason'])}",
        ),
        styled("[bold]{}[/], {}", f"ratio (with collectors / bare) = {r['ratio']:.4f}", interval),
        Text(f"  per round: {', '.join(f'{x:.4f}' for x in r['ratio_per_round'])}"),
        styled("[yellow]{}[/]", verdict) if r["hides_one_percent"] else Text(verdict),
    ]
    need = r.get("rounds_for_target")
    if r["stop_reason"] != "target" and need:
        lines.append(
            Text(
                f"  about {need} rounds would bring the half-width to {r['target_half_width']:.1%} "
                "(`--max-rounds`, `--max-s`; a quieter machine needs fewer)"
            )
        )
    return lines
