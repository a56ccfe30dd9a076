"""`tbdkit report`'s build: the paper's figures, tables and claim checks, from the results on disk.

build_report(results, out) reads the index and run directories (never a framework) and writes
out/report.html (self-contained: figures embedded), out/report.md, out/summary.csv and
out/figures/*.png|svg. It returns the path of report.html.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import io
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, FileSystemLoader

from tbdkit import __version__
from tbdkit.analysis.cost import Prices
from tbdkit.core import atomic
from tbdkit.core.errors import UserError
from tbdkit.core.frameworks import PAPER_FRAMEWORKS
from tbdkit.core.paths import workloads_dir
from tbdkit.report import claims, compiled, energy_cost, figures, modern, tables
from tbdkit.report import runs as runs_mod
from tbdkit.results import sink

TEMPLATES = Path(__file__).with_name("templates")


def _write(path: Path, text: str) -> None:
    atomic.write_text(path, text)


@dataclass(frozen=True)
class Built:
    """What one report build computed, for the command to print as it is: report.html's path, the claim
    checks, how the runs were grouped into series, and what was done with the disturbed runs."""

    html: Path
    verdicts: list[claims.Verdict]
    grouping: str
    disturbed: int
    disturbed_text: str


def build_report(
    results_dir: Path,
    out_dir: Path,
    include_disturbed: bool = False,
    prices: Prices | None = None,
    with_compiled: bool = False,
) -> Path:
    """Write the report into out_dir (report.html, report.md, summary.csv, figures/); report.html's path."""
    return build(results_dir, out_dir, include_disturbed, prices, with_compiled).html


def build(
    results_dir: Path,
    out_dir: Path,
    include_disturbed: bool = False,
    prices: Prices | None = None,
    with_compiled: bool = False,
) -> Built:
    """Write the report into out_dir; what the build computed (Built)."""
    results_dir, out_dir = Path(results_dir), Path(out_dir)
    if not results_dir.is_dir():
        raise UserError(f"No results folder at {results_dir}: pass the folder `tbdkit bench --results` wrote to.")
    runs = runs_mod.load(results_dir)
    if not runs:
        raise UserError(f"{results_dir} holds no run that finished ok: run `tbdkit bench` or `tbdkit sweep` first.")
    disturbed = sum(r.disturbed for r in runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    # the paper's figures and claims keep its settings: standard graphs, unless compiled runs are asked for; and
    # its frameworks: the machinery check's runs (numpy) are listed with the others, never compared or drawn
    paper = compiled.paper_runs([r for r in runs if r.framework in PAPER_FRAMEWORKS], with_compiled)
    drawn = figures.draw(paper, out_dir)
    # CPU-only results: every claim needs GPU runs, whether or not their CPU runs were disturbed (leaving the
    # disturbed ones out would leave no run, and "not enough data" would hide why)
    cpu_only = not any(r.is_gpu for r in runs)
    verdicts = claims.check_all(paper if cpu_only else runs_mod.for_claims(paper, include_disturbed))
    generated = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    context = {
        "results": str(results_dir),
        "generated": generated,
        "kit_version": __version__,
        "runs": runs,
        "verdicts": verdicts,
        "counts": {
            "holds": sum(v.verdict == claims.HOLDS for v in verdicts),
            "fails": sum(v.verdict == claims.FAILS for v in verdicts),
            "nodata": sum(v.verdict in claims.UNDECIDED for v in verdicts),
        },
        "disturbed": disturbed_text(disturbed, include_disturbed),
        "cpu_only": cpu_only_text(len(runs), disturbed) if cpu_only else None,
        "grouping": runs_mod.grouping(runs),
        "figures": [_figure_context(f) for f in drawn],
        "run_header": tables.DISPLAY_HEADER,
        "run_rows": tables.display_rows(runs),
        "run_flags": tables.flag_notes(runs),
        "kernel_tables": tables.kernel_tables(runs),
        "kernel_missing": tables.kernel_table_missing(runs),
        "paper_tables": tables.paper_kernel_tables(),
        "memory_header": tables.MEMORY_HEADER,
        "memory_rows": tables.memory_rows(runs),
        "env_header": tables.ENV_HEADER,
        "env_rows": tables.environment_rows(runs),
        **energy_cost.context(runs, prices, workloads_dir()),
        **compiled.context(runs, paper),
        **modern.context(runs),
    }
    # Every template here writes HTML, and every value it is handed is text (a run's files, a folder's name,
    # prices.toml): autoescaped always, whatever the template's file name ends with.
    jinja = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True)
    html = out_dir / "report.html"
    _write(html, jinja.get_template("report.html.j2").render(**context))
    _write(out_dir / "report.md", _markdown(context, drawn))
    _write_csv(out_dir / "summary.csv", tables.summary_rows(runs))
    return Built(html, verdicts, context["grouping"].text, disturbed, context["disturbed"])


def cpu_only_text(count: int, disturbed: int) -> str:
    """The report's first words when no run was on a GPU."""
    return (
        f"These are CPU runs: none of the {count} run(s) was on a GPU. The paper's observations are about GPU "
        "training, so every claim below needs GPU runs; the figures and tables show what the CPU measured"
        + (
            f", and {'every run' if disturbed == count else f'{disturbed} run(s)'} was disturbed by other load "
            "on the machine (see the Runs table's flags)."
            if disturbed
            else "."
        )
    )


def disturbed_text(count: int, included: bool) -> str:
    """What the report did with the disturbed runs (tbdkit.agent.disturbance), in one sentence."""
    if not count:
        return "No run was disturbed."
    return (
        f"{count} run(s) disturbed (foreign CPU load, another GPU process or throttling in the window: see their "
        "flag): drawn hollow in the figures and "
        + (
            "included in the claim checks (--include-disturbed)."
            if included
            else "left out of the claim checks (--include-disturbed keeps them)."
        )
    )


def _figure_context(f: figures.Result) -> dict:
    if isinstance(f, figures.Figure):
        png = (f.files or {})["png"].read_bytes()
        return {"key": f.key, "title": f.title, "caption": f.caption, "png": base64.b64encode(png).decode()}
    return {"key": f.key, "title": f.title, "reason": f.reason, "png": None}


def _write_csv(path: Path, rows: list[dict]) -> None:
    fh = io.StringIO(newline="")
    writer = csv.DictWriter(fh, fieldnames=list(tables.SUMMARY_COLUMNS))
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else sink.spreadsheet_cell(v)) for k, v in row.items()})
    atomic.write_text(path, fh.getvalue())


def _table_or_missing(ctx: dict, key: str) -> list[str]:
    """A section's Markdown table (ctx's `<key>_header` and `<key>_rows`), or the sentence saying why there is none."""
    rows = ctx[f"{key}_rows"]
    return [tables.md_table(ctx[f"{key}_header"], rows) if rows else ctx[f"{key}_missing"], ""]


def _markdown(ctx: dict, drawn: list[figures.Result]) -> str:
    parts = [
        f"# tbdkit report\n\n{len(ctx['runs'])} run(s) from `{ctx['results']}`, {ctx['generated']}, "
        f"tbdkit {ctx['kit_version']}.\n",
        *([f"**{ctx['cpu_only']}**\n"] if ctx["cpu_only"] else []),
        f"{ctx['grouping'].text}\n",
        "## The paper's observations, checked on these results\n",
        f"{ctx['counts']['holds']} hold · {ctx['counts']['fails']} do not hold · "
        f"{ctx['counts']['nodata']} lack the data to decide. {ctx['disturbed']}\n",
    ]
    for v in ctx["verdicts"]:
        parts.append(
            f"**{v.n}. {v.claim}** — *{v.verdict}*  \nRule: {v.rule}\n" + (f"\nNote: {v.note}\n" if v.note else "")
        )
        parts += [f"- {e}" for e in v.evidence]
        parts.append("")
    parts.append("## Figures\n")
    for f in drawn:
        if isinstance(f, figures.Figure):
            parts.append(f"![{f.title}](figures/{f.key}.png)\n\n*{f.title}.* {f.caption}\n")
        else:
            parts.append(f"*{f.title}:* not drawn — {f.reason}.\n")
    parts += ["## Runs\n", tables.md_table(ctx["run_header"], ctx["run_rows"]), ""]
    parts += [f"- {note}" for note in ctx["run_flags"]] + ([""] if ctx["run_flags"] else [])
    parts += [
        "## Energy over the sample window\n",
        tables.md_table(ctx["energy_header"], ctx["energy_rows"]),
        "",
        *[f"{n}  " for n in ctx["energy_notes"]],
        "",
    ]
    parts += ["## Cost\n", *_table_or_missing(ctx, "cost")]
    parts += ["## Comparison with the committed reference results\n", *_table_or_missing(ctx, "comparison")]
    parts += ["## Compiled graphs against standard ones\n", *_table_or_missing(ctx, "compiled")]
    if ctx["compiled_left_out"]:
        parts += [ctx["compiled_left_out"], ""]
    parts += ["## Modern workloads: throughput, MFU and memory per GPU\n", *_table_or_missing(ctx, "modern")]
    if ctx["modern_comparison_rows"]:
        parts += [tables.md_table(ctx["modern_comparison_header"], ctx["modern_comparison_rows"]), ""]
    parts += [tables.md_table(ctx["modern_reference_header"], ctx["modern_reference_rows"]), ""]
    parts += [f"{n}  " for n in ctx["modern_differs"]] + [""]
    parts.append("## Kernels: the longest below average FP32 utilization (paper Tables V/VI)\n")
    if ctx["kernel_missing"]:
        parts.append(f"Not measured here: {ctx['kernel_missing']}.\n")
    for t in ctx["kernel_tables"] + ctx["paper_tables"]:
        parts += [
            f"### {t['title']}\n",
            tables.md_table(["share of GPU time", "FP32 utilization", "kernel"], t["rows"]),
            "",
        ]
    parts.append("## Memory breakdown\n")
    parts.append(
        tables.md_table(ctx["memory_header"], ctx["memory_rows"])
        if ctx["memory_rows"]
        else "No run holds a memory breakdown (memory.json)."
    )
    parts += ["", "## Environment\n", tables.md_table(ctx["env_header"], ctx["env_rows"]), ""]
    return "\n".join(parts)
