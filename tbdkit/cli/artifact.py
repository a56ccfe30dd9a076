"""`tbdkit bundle` and `tbdkit reproduce`: results as one checked artifact, and re-running it here."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from tbdkit.artifact import bundle as artifact
from tbdkit.artifact import doc as artifact_doc
from tbdkit.artifact import plan as reproduce_plan
from tbdkit.artifact import workloads as carried_workloads
from tbdkit.cli.common import WorkloadsOpt, use_workloads
from tbdkit.cli.console import console, err_console, styled
from tbdkit.core.errors import UserError
from tbdkit.core.paths import default_results_dir, existing_results_dir
from tbdkit.results import files as runfiles
from tbdkit.results import outputs, readers, sink
from tbdkit.results.summary import exit_code_of
from tbdkit.spec import catalog
from tbdkit.spec import run_spec as specs

SHOWN = 10  # excluded files printed by `tbdkit bundle`; the manifest lists all


def bundle(
    results: Annotated[Path | None, typer.Argument(help="results folder (default: results)")] = None,
    out: Annotated[Path, typer.Option("--output", "-o", help="the bundle to write")] = Path("artifact.tar.gz"),
    workloads: WorkloadsOpt = None,
) -> None:
    """Bundle RESULTS as an artifact package: ARTIFACT.md, runs, sweeps, report, calibration, lock files,
    images.lock, CITATION.cff, .zenodo.json, LICENSE, with a sha256 manifest."""
    use_workloads(workloads)
    results = existing_results_dir(results or default_results_dir())
    outputs.check_file(out, "-o", replaceable=artifact.is_bundle(out))  # an earlier bundle, nothing else
    manifest = artifact.bundle(results, out)
    report = manifest["report"]
    console.print(
        f"wrote {out}: {len(manifest['runs'])} runs, {len(manifest['sweeps'])} sweeps, "
        f"{len(manifest['files'])} files (sha256 of each in {artifact.PREFIX}/{artifact.MANIFEST}), "
        f"{out.stat().st_size / 1024:,.1f} KiB",
        highlight=False,
    )
    console.print(
        f"report: {report['path'] if report['included'] else 'not included: ' + report['reason']}", highlight=False
    )
    if manifest["guide"]:
        console.print(f"guide for reviewers: {artifact.PREFIX}/{manifest['guide']}", highlight=False)
    for item in manifest["missing"]:
        console.print(styled("[yellow]missing[/]: {}: {}", item["path"], item["reason"]), highlight=False)
    for broken in manifest["broken_runs"]:
        console.print(styled("[yellow]not packed[/]: run {}: {}", broken["run"], broken["reason"]), highlight=False)
    excluded = manifest["excluded"]
    for item in excluded[:SHOWN]:
        console.print(f"left out: {item['path']}: {item['reason']}", highlight=False)
    if len(excluded) > SHOWN:
        console.print(
            f'left out: {len(excluded) - SHOWN} more (every one in the manifest\'s "excluded")',
            highlight=False,
        )
    console.print(
        "this machine's paths and host name are replaced by placeholders (the manifest's \"placeholders\")",
        highlight=False,
    )


def reproduce(
    bundle_path: Annotated[Path, typer.Argument(metavar="ARTIFACT", help="a bundle made by `tbdkit bundle`")],
    results: Annotated[
        Path | None, typer.Option("--results", "-r", help="where the new runs go (default: results)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the comparison as JSON")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="compare even with runs made on another lock (the differences are listed)")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="run the plan without asking (it is printed all the same)")
    ] = False,
    workloads: WorkloadsOpt = None,
) -> None:
    """Re-run every run of ARTIFACT that finished (ok or disturbed: its ARTIFACT.md lists them) with the same spec
    here; report new / recorded, point by point, and per run and per claim: reproduced / not reproduced / not
    comparable (different GPU). A disturbed run's verdict is flagged with what that means for it. Prints its plan
    (runs, caps, expected time) and asks before running, unless --yes. A model from outside the kit runs from
    the bundle's copy of its folder."""
    use_workloads(workloads)
    results = results or default_results_dir()
    if not bundle_path.is_file():
        raise UserError(f"No bundle at {bundle_path}: pass the path of a file made by `tbdkit bundle`.")
    manifest, files = artifact.read(bundle_path)
    bundled_dir = Path(tempfile.mkdtemp(prefix="tbdkit-bundled-workloads-"))
    try:
        _reproduce(manifest, files, bundle_path, bundled_dir, results, as_json, force, yes)
    finally:
        shutil.rmtree(bundled_dir, ignore_errors=True)


def _reproduce(
    manifest: dict[str, Any],
    files: Any,
    bundle_path: Path,
    bundled_dir: Path,
    results: Path,
    as_json: bool,
    force: bool,
    yes: bool,
) -> None:
    from tbdkit.bench.run_list import run_all

    bundled = carried_workloads.unpack(files, bundled_dir)  # the bundle's own models run, not those installed here
    for line in carried_workloads.differences_here(files, bundled):
        (err_console if as_json else console).print(styled("[yellow]differs[/]: {}", line), highlight=False)
    catalog.use_bundled(bundled)
    recorded = artifact.recorded_runs(files)
    if not recorded:
        raise UserError(
            f"{bundle_path} holds no run that finished (ok or disturbed) with its spec: there is nothing to reproduce."
        )
    run_specs = [specs.parse(spec) for spec, _ in recorded]  # every spec valid here before any runs
    mismatches = artifact.lock_mismatches(files, [str(summary.get("run_id")) for _, summary in recorded])
    if mismatches and not force:
        raise UserError(
            f"{len(mismatches)} of the bundle's runs were made on another lock than this kit's "
            f"({lock_mismatch_text(mismatches)}): their numbers would compare two environments. "
            "Recreate the bundle's environment from the locks it carries (its manifest's \"locks\"), "
            "or pass --force to compare anyway."
        )
    for m in mismatches:
        (err_console if as_json else console).print(
            styled("[yellow]another lock[/]: run {}: {}", m["run"], lock_mismatch_text([m], shown=20)),
            highlight=False,
        )
    planned = reproduce_plan.plan(recorded, run_specs)  # every run fits this machine before anything is asked
    out_console = err_console if as_json else console
    # the bundle's path on a line of its own: a table's title is cut to the table's width
    out_console.print(f"reproducing {bundle_path}: the plan", highlight=False)
    out_console.print(plan_table(planned))
    if not yes:
        confirm(f"Run these {len(planned.runs)} run(s) here, into {results}?")
    points: list[dict[str, Any]] = []
    new_dirs: list[Path] = []
    for (_, old), new in zip(recorded, run_all(planned.checked, results, None, quiet_stdout=as_json)):
        point = artifact.compare(old, new)
        new_dir = results / str(new.get("run_id"))
        new_dirs.append(new_dir)
        point.update(
            artifact.run_verdict(
                point,
                artifact_doc.device_of(old, artifact.recorded_env(files, str(old.get("run_id")))),
                artifact_doc.device_of(new, readers.json_object(new_dir / runfiles.ENV)),
            )
        )
        points.append(point)
    claim_verdicts = artifact.claim_verdicts(files, new_dirs)
    report = {
        "bundle": str(bundle_path),
        "bundle_kit_version": manifest.get("kit_version"),
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "results": str(results),
        "method": "ratio = new / recorded value of each metric, same spec",
        "lock_mismatches": mismatches,
        "points": points,
        "claims": claim_verdicts,
    }
    out = results / f"reproduce-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%d-%H%M%S')}.json"
    sink.write_json(out, report)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        console.print(ratio_table(points, str(bundle_path)))
        console.print(claims_table(claim_verdicts))
    (err_console if as_json else console).print(f"comparison written to {out}", highlight=False)
    raise typer.Exit(exit_code_of(p["new_status"] for p in points) if len(points) == len(recorded) else 1)


def plan_table(planned: reproduce_plan.Plan) -> Table:
    """One row a run: its recorded id (which names the model, framework, batch and precision) read whole,
    then where and how it runs again and its caps."""
    table = Table()
    table.add_column("recorded run", no_wrap=True)
    for col in ("workers", "launcher", "device", "data"):
        table.add_column(col, justify="right" if col == "workers" else "left")
    table.add_column("caps", no_wrap=True)
    table.add_column("recorded wall time", justify="right")
    for r in planned.runs:
        s = r.spec
        table.add_row(
            r.recorded_run,
            str(s.world_size),
            s.launcher,
            s.device,
            s.data,
            r.caps_text,
            "—" if r.recorded_wall_s is None else f"{r.recorded_wall_s:,.0f} s",
        )
    table.caption = planned.total_text()
    return table


def confirm(question: str) -> None:
    """Go on when the user says yes; otherwise exit having run nothing. No answer (stdin closed) is a no."""
    try:
        answer = typer.confirm(question, default=False, err=True)
    except typer.Abort:
        raise UserError(
            "reproduce asks before it runs anything and no answer came (stdin is closed): pass --yes to run "
            "the plan without asking."
        ) from None
    if not answer:
        err_console.print("nothing was run", highlight=False)
        raise typer.Exit(1)


def lock_mismatch_text(mismatches: list[dict[str, Any]], shown: int = 3) -> str:
    """`mxnet: recorded a111b0d1, here 9c0f...; numpy 1.23.5 -> 1.23.4, uv 0.13.9 -> (none)` per lock, once."""
    parts: dict[str, str] = {}
    for m in mismatches:
        diffs = m["differences"]
        what = (
            m["reason"]
            if diffs is None
            else ", ".join(
                f"{d['package']} {d['recorded'] or '(none)'} -> {d['here'] or '(none)'}" for d in diffs[:shown]
            )
            + (f" and {len(diffs) - shown} more" if len(diffs) > shown else "")
            if diffs
            else "the same pins"
        )
        parts.setdefault(m["lock"], f"{m['lock']}: recorded {m['recorded_digest']}, here {m['digest_here']}; {what}")
    return "; ".join(parts.values())


def ratio_table(points: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=f"reproducing {title}: new / recorded")
    for col in (
        "model",
        "framework",
        "batch",
        "precision",
        "status (recorded → new)",
        "throughput recorded",
        "new",
        "ratio",
        "verdict",
        "other metrics (ratio)",
    ):
        table.add_column(col, justify="right" if col in ("batch", "ratio", "new", "throughput recorded") else "left")
    for p in points:
        m = p["metrics"]
        thr = m.get("throughput") or {}
        others = ", ".join(
            f"{k} {v['ratio']:.3f}" if v["ratio"] is not None else f"{k} — ({v['reason']})"
            for k, v in m.items()
            if k != "throughput"
        )
        table.add_row(
            p["model"],
            p["framework"],
            str(p["batch_size"]),
            p["precision"],
            f"{p.get('recorded_status') or '?'} → {p['new_status']}",
            _num(thr.get("recorded"), thr.get("unit")),
            _num(thr.get("new"), thr.get("unit")),
            "—" if thr.get("ratio") is None else f"{thr['ratio']:.3f}",
            styled("{}: {} [yellow](flagged: {})[/]", p["verdict"], p["reason"], p["disturbed"])
            if p.get("disturbed")
            else f"{p['verdict']}: {p['reason']}",
            others or "—",
        )
    table.caption = "ratio 1.000: the same figure as recorded; devices and load differ between machines"
    return table


def claims_table(verdicts: list[dict[str, Any]]) -> Table:
    table = Table(title="the paper's observations: recorded runs / re-runs")
    for col in ("obs.", "claim", "recorded", "re-run", "verdict"):
        table.add_column(col)
    for v in verdicts:
        table.add_row(str(v["n"]), v["claim"], v["recorded"], v["new"], f"{v['verdict']}: {v['reason']}")
    return table


def _num(value: float | None, unit: str | None) -> str:
    return "—" if value is None else f"{value:,.2f} {unit or ''}".strip()
