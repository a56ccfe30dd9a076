"""What the commands share: the results option and the one way a user's error is printed."""

from __future__ import annotations

import errno
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from tbdkit.cli.console import err_console, styled
from tbdkit.core.errors import UserError
from tbdkit.spec import catalog

ResultsOpt = Annotated[Path, typer.Option("--results", "-r", help="results folder")]
ParallelOpt = Annotated[
    str,
    typer.Option(
        help="PyTorch data-parallel jobs: ddp (each worker holds the whole model) | fsdp (FSDP2 shards parameters, "
        "gradients and optimizer state over the workers; llama)"
    ),
]
CpusOpt = Annotated[
    int | None,
    typer.Option(
        "--cpus",
        help="cores each run is given: the frameworks' intra-op threads are set from it, a data-loading "
        "worker counted against it (default: every core of the affinity mask and cgroup quota)",
    ),
]
PrecisionOpt = Annotated[
    str,
    typer.Option(
        help="fp32 (TF32 off) | tf32 | amp | bf16 (bfloat16 autocast, no loss scaling) | fp8 (PyTorch: torchao float8)"
    ),
]
GraphOpt = Annotated[
    str,
    typer.Option(
        help="standard (the paper's: PyTorch eager, TensorFlow tf.function, MXNet hybridized) | compiled "
        "(torch.compile with inductor, XLA, MXNet static shapes; compilation measured apart)"
    ),
]
CompileCacheOpt = Annotated[
    str,
    typer.Option(
        "--compile-cache",
        help="private (each compiled run compiles from an empty cache: compile_s is the cold cost) | shared "
        "(PyTorch's inductor and Triton caches kept across runs: the warm cost; recorded in spec.json)",
    ),
]
OneProcessOpt = Annotated[
    bool,
    typer.Option(
        "--one-process",
        help="TensorFlow, MXNet: train the --gpus-per-node replicas in one process (MirroredStrategy, "
        "the `device` kvstore), as the paper's single-machine runs did",
    ),
]
WorkloadsOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--workloads",
        help="a folder of your own models, added to the kit's (repeatable; also TBDKIT_WORKLOAD_PATH, ':'-separated): "
        "a model's folder holding workload.toml, or a folder whose folders are models (docs/your-own-model.md)",
    ),
]


def use_workloads(folders: list[Path] | None) -> None:
    """Add `--workloads` folders to the models this command and the agents it starts see; a folder that
    holds no model, cannot be read or names a model twice is one sentence with the fix."""
    catalog.add_outside(list(folders or []))
    catalog.models()  # a clash or a broken workload.toml is said now, before the command's work


WarmupCapOpt = Annotated[
    float | None,
    typer.Option(
        help="a fixed cap on each warm-up, seconds (default: the preset's, which may stretch to fit the rule)"
    ),
]
PinOpt = Annotated[bool, typer.Option("--pin", help="pin each run's process to its --cpus cores (sched_setaffinity)")]


def check_cpus(requested: int | None) -> int | None:
    """`--cpus` as given, or a UserError when this machine cannot give that many cores."""
    from tbdkit.env import cpus

    why = cpus.check_request(requested)
    if why:
        raise UserError(why[0].upper() + why[1:] + ".")
    return requested


def name_too_long(exc: BaseException) -> str | None:
    """The one sentence for a path the file system refuses as too long (a results folder of 300
    characters, say), wherever a command meets it; None for any other error."""
    if not isinstance(exc, OSError) or exc.errno != errno.ENAMETOOLONG:
        return None
    name = str(exc.filename or "")
    longest = max((len(part.encode()) for part in Path(name).parts), default=0)
    shown = name if len(name) <= 60 else f"{name[:57]}..."
    return (
        f"The path {shown} is too long for this file system (a name of {longest} bytes; most allow 255 per "
        "name and 4,096 per path): choose a shorter folder or file name."
    )


INTERRUPTED = (
    "Interrupted (Ctrl-C) before the command finished: run it again to redo it (a sweep resumes where it stopped)."
)


def friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """User errors become one red sentence and exit code 2, never a traceback; a Ctrl-C that no run handled
    (installing, indexing, a report, between a sweep's points) exits 130, the shell's code for it, with a sentence
    saying what to do (Typer alone exits 130 in silence). A run's own Ctrl-C is its launcher's: the run keeps what
    it measured."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            err_console.print(INTERRUPTED, highlight=False, markup=False, soft_wrap=True)
            raise typer.Exit(130) from None
        except Exception as exc:
            # UserError, and a workload's DataError (workloads cannot import the kit's class)
            too_long = name_too_long(exc)
            if too_long is not None:
                exc = UserError(too_long)
            if not isinstance(exc, UserError) and not catalog.is_data_error(exc):
                raise
            err_console.print(styled("[bold red]error:[/] {}", exc), highlight=False)
            raise typer.Exit(2) from None

    return wrapper


PriceOpt = Annotated[
    float | None,
    typer.Option(
        "--price-per-hour",
        help="your price per hour of this machine (or TBDKIT_PRICE_PER_HOUR, or a prices.toml): "
        "adds cost per million samples and cost of each run",
    ),
]


def cost_table(summaries: list[dict[str, Any]], results: Path, prices: Any) -> Any:
    """Cost per million samples and cost of each run at the prices given (tbdkit.analysis.cost), as a table;
    the price (where from, when given) in its caption, or per row when devices have their own."""
    from rich.table import Table

    from tbdkit.analysis import cost
    from tbdkit.results import files as runfiles
    from tbdkit.results import readers

    rows = []
    for s in summaries:
        env = readers.json_object(results / str(s.get("run_id")) / runfiles.ENV)
        device = readers.device_name(s, env)
        price = cost.price_of(prices, device)
        c = cost.costs(s, price)
        cells = [
            "—" if m["value"] is None else f"{m['value']:,.4g} {m['unit'].removesuffix('/1M samples')}"
            for m in (c["cost_per_million_samples"], c["run_cost"])
        ]
        rows.append((s, device, cells, price.text if price else str(c["run_cost"]["reason"])))
    one_price = len({r[3] for r in rows}) == 1
    table = Table(title="Cost")
    for col in ("framework", "batch", "device", "per 1M samples", "this run") + (() if one_price else ("price",)):
        table.add_column(col, justify="right" if col in ("batch", "per 1M samples", "this run") else "left")
    for s, device, cells, price_text in rows:
        table.add_row(
            str(s.get("framework")),
            str(s.get("batch_size")),
            device,
            *cells,
            *(() if one_price else (price_text,)),
        )
    table.caption = (
        f"at {rows[0][3]}; " if one_price and rows else ""
    ) + "samples: the model's sample unit; a run's cost covers its whole wall time (setup included)"
    return table
