"""The report's energy, cost and reference-comparison tables (beyond the paper: docs/energy-and-cost.md).

Energy: each run's window energy of the device that trained, its average power, energy per unit of
work and samples per kJ, beside its throughput (null with the reason, once per reason). Cost: at
the prices the user gave (tbdkit.analysis.cost), per million samples and per run. Comparison: each run
against the committed reference of the same spec and GPU (tbdkit.analysis.compare), when one exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tbdkit.analysis import compare, cost
from tbdkit.core.errors import UserError
from tbdkit.report.runs import Run
from tbdkit.report.tables import fmt, summary_row, throughput_text

ENERGY_HEADER = [
    "run",
    "device",
    "throughput (95% CI)",
    "energy J",
    "mean power W",
    "energy per unit of work",
    "samples per kJ",
]
COST_HEADER = ["run", "device", "throughput (95% CI)", "cost per 1M samples", "cost of the run", "price"]
COMPARISON_HEADER = ["run", "reference", "verdict", "A/B (95% CI)", "detectable difference"]


def _energy_name(r: Run) -> str:
    return "gpu" if r.is_gpu else "cpu"


def _value(r: Run, name: str, reasons: dict[str, int]) -> str:
    """A metric's value with its unit, or a dash and the footnote number of its reason."""
    entry = r.metric_entry(name)
    value = entry.get("value")
    if isinstance(value, (int, float)):
        return f"{fmt(float(value))} {entry.get('unit') or ''}".strip()
    reason = str(entry.get("reason") or "not recorded by this run (a kit without energy measurement)")
    n = reasons.setdefault(reason, len(reasons) + 1)
    return f"— [{n}]"


def energy_rows(runs: list[Run]) -> tuple[list[list[str]], list[str]]:
    """One row per run, and the numbered reasons of its missing values."""
    reasons: dict[str, int] = {}
    rows = []
    for r in runs:
        name = _energy_name(r)
        rows.append(
            [
                f"{r.model}/{r.framework} b{r.batch_size}",
                r.device_name,
                throughput_text(r, summary_row(r)),
                _value(r, f"{name}_energy", reasons),
                _value(r, f"{name}_power", reasons),
                _value(r, "energy_per_work", reasons),
                _value(r, "samples_per_kj", reasons),
            ]
        )
    return rows, [f"[{n}] {text}" for text, n in reasons.items()]


def cost_rows(runs: list[Run], prices: cost.Prices) -> list[list[str]]:
    rows = []
    for r in runs:
        price = cost.price_of(prices, r.device_name)
        c = cost.costs(r.summary, price)
        cells = [
            ("—" if m["value"] is None else f"{m['value']:,.4g} {m['unit']}")
            for m in (c["cost_per_million_samples"], c["run_cost"])
        ]
        rows.append(
            [
                f"{r.model}/{r.framework} b{r.batch_size}",
                r.device_name,
                throughput_text(r, summary_row(r)),
                *cells,
                price.text if price else str(c["run_cost"]["reason"]),
            ]
        )
    return rows


def comparison(runs: list[Run], workloads: Path) -> tuple[list[list[str]], str | None]:
    """Each run against its committed reference: rows, or the sentence saying there is none."""
    rows = []
    committed = {r.model for r in runs if compare.reference_dirs(workloads, r.model)}
    for r in runs:
        if r.model not in committed:
            continue
        try:
            side = compare.load(r.path)
        except UserError:
            continue
        ref = compare.matching_reference(side, workloads)
        if ref is None:
            continue
        try:
            result = compare.compare(side, ref)
        except UserError as exc:  # no verdict (a window of one iteration): the row says why
            rows.append(
                [
                    f"{r.model}/{r.framework} b{r.batch_size} ({r.run_id})",
                    str(ref.path.relative_to(workloads)),
                    f"no verdict: {exc}",
                    "—",
                    "—",
                ]
            )
            continue
        rows.append(
            [
                f"{r.model}/{r.framework} b{r.batch_size} ({r.run_id})",
                str(ref.path.relative_to(workloads)),
                f"{result.verdict} ({result.noise})",
                f"{result.ratio:.3f} ({result.low:.3f}-{result.high:.3f})",
                f"{result.detectable:.1%}",
            ]
        )
    if rows:
        return rows, None
    devices = sorted({r.device_name for r in runs})
    models = sorted({r.model for r in runs})
    folders = ", ".join(str(workloads / model / "reference") for model in models)
    return [], (
        f"No committed reference result matches these runs (model, framework, preset, precision, batch and "
        f"device: {', '.join(devices)}): {folders} {'holds' if len(models) == 1 else 'hold'} none for them yet."
    )


def context(runs: list[Run], prices: cost.Prices | None, workloads: Path) -> dict[str, Any]:
    """What the report's templates need for the three sections."""
    e_rows, e_notes = energy_rows(runs)
    c_rows, c_missing = comparison(runs, workloads)
    return {
        "energy_header": ENERGY_HEADER,
        "energy_rows": e_rows,
        "energy_notes": e_notes,
        "cost_header": COST_HEADER,
        "cost_rows": cost_rows(runs, prices) if prices else [],
        "cost_missing": None
        if prices
        else (
            "No price was given: pass --price-per-hour, set "
            f"{cost.ENV_PRICE}, or fill a {cost.PRICES_FILE} (the kit ships no prices)."
        ),
        "comparison_header": COMPARISON_HEADER,
        "comparison_rows": c_rows,
        "comparison_missing": c_missing,
    }
