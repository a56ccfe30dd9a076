"""The report's compiled / standard table: for each model, framework and setting measured both ways,
what `--graph compiled` buys (throughput ratio with its confidence interval, through
tbdkit.analysis.compare) and what it costs (compile_s), with what each compiler did (graph breaks and
recompilations, or why a cell trained as standard).

The paper's figures and claim checks keep the paper's settings: standard graphs only, unless the
report is asked for compiled runs too (`tbdkit report --with-compiled`)."""

from __future__ import annotations

from statistics import fmean
from typing import Any

from tbdkit.analysis import compare
from tbdkit.core.errors import UserError
from tbdkit.report.runs import Run
from tbdkit.report.tables import fmt

HEADER = [
    "model / framework",
    "setting",
    "standard",
    "compiled",
    "compiled / standard (95% CI)",
    "verdict",
    "compile time",
    "what the compiler did",
]
MISSING = (
    "No model was measured both ways: run it with --graph standard and --graph compiled (same batch, "
    "precision and device; three runs a side give an interval that holds run-to-run variation)."
)


def graph_of(run: Run) -> str:
    """A run's graph; runs made before compiled runs existed were standard."""
    return run.graph


def paper_runs(runs: list[Run], with_compiled: bool = False) -> list[Run]:
    """The runs the paper's figures and claims are drawn from: standard graphs unless asked."""
    return runs if with_compiled else [r for r in runs if graph_of(r) == "standard"]


def compiler_note(run: Run) -> str:
    """One compiled run's compile record in a few words."""
    record = run.summary.get("compile") or {}
    if not isinstance(record, dict):
        return "—"
    if record.get("reason"):
        return f"trained as standard: {record['reason']}"
    parts = []
    if record.get("graph_breaks") is not None:
        parts.append(f"{record['graph_breaks']} graph break(s)")
    if record.get("recompilations") is not None:
        parts.append(f"{record['recompilations']} recompilation(s)")
    if record.get("compilations") is not None and not parts:
        parts.append(f"{record['compilations']} compilation(s)")
    if record.get("dynamic") is not None:
        parts.append("dynamic shapes" if record["dynamic"] else "static shapes")
    after = record.get("compilations_after_compile_phase")
    if after:
        parts.append(f"{after} compilation(s) after the compile phase")
    return ", ".join(parts) or str(record.get("compiler") or "—")


def _sides(runs: list[Run]) -> list[compare.Side]:
    out = []
    for r in runs:
        try:
            out.append(compare.load(r.path))
        except UserError:
            continue
    return out


def rows(runs: list[Run]) -> list[list[str]]:
    """One row per like pair of settings (everything but the graph the same) measured both ways."""
    groups: dict[tuple[Any, ...], dict[str, list[Run]]] = {}
    for r in runs:
        if r.world_size != 1:
            continue
        key = (*r.series.but("graph"), r.batch_size)
        groups.setdefault(key, {}).setdefault(graph_of(r), []).append(r)
    out = []
    for _, by_graph in sorted(groups.items(), key=lambda kv: str(kv[0])):
        standard, compiled = _sides(by_graph.get("standard", [])), _sides(by_graph.get("compiled", []))
        if not standard or not compiled:
            continue
        try:
            result = compare.compare(compiled, standard)
        except UserError as exc:
            result, why = None, str(exc)
        first = by_graph["compiled"][0]
        # the compile phase's extra seconds, each run's
        compile_s = [s for s in (r.metric("compile_s") for r in by_graph["compiled"]) if s is not None]
        setting = f"b{first.batch_size} {first.precision}, {first.device_name}"
        unit = first.unit
        if result is None:
            ratio, verdict = "—", why
        else:
            ratio = f"{result.ratio:.3f} ({result.low:.3f}-{result.high:.3f})"
            verdict = f"{result.verdict} ({result.noise}, {len(result.a)}+{len(result.b)} runs)"
        out.append(
            [
                f"{first.model} / {first.framework}",
                setting,
                f"{fmt(compare.geometric_mean(standard))} {unit}",
                f"{fmt(compare.geometric_mean(compiled))} {unit}",
                ratio,
                verdict,
                f"{fmt(fmean(compile_s))} s" if compile_s else "—",
                "; ".join(dict.fromkeys(compiler_note(r) for r in by_graph["compiled"])),
            ]
        )
    return out


def left_out(count: int) -> str:
    """What the paper's figures did with the compiled runs, in one sentence ('' when there were none)."""
    if not count:
        return ""
    return (
        f"{count} compiled run(s) are left out of the paper's figures and claim checks, which keep its settings "
        "(standard graphs; `tbdkit report --with-compiled` draws them)."
    )


def context(runs: list[Run], paper: list[Run]) -> dict[str, Any]:
    found = rows(runs)
    return {
        "compiled_header": HEADER,
        "compiled_rows": found,
        "compiled_missing": None if found else MISSING,
        "compiled_left_out": left_out(len(runs) - len(paper)),
    }
