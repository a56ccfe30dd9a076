"""The corpus of real run folders (tests/corpus/: made by real runs of each stack, remade by
tests/corpus/regenerate.sh), by role: what the tests of readers (report, bundle, reproduce, trace, mllog,
compare, index) read instead of run folders built by hand."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).with_name("corpus")
RUNS = CORPUS / "runs"
MANIFEST = CORPUS / "corpus.json"


def roles() -> dict[str, str]:
    """Each role (pytorch-standard, mxnet-disturbed, ...) and its run folder's name."""
    return json.loads(MANIFEST.read_text())


def run(role: str) -> Path:
    """The committed run folder of `role` (read it; never write into it: copy it with `copy`)."""
    return RUNS / roles()[role]


def copy(role: str, results: Path, index: bool = True) -> Path:
    """`role`'s run folder copied into the results folder `results` (made if need be), and indexed there as
    `tbdkit bench` indexes a run it made (`index`); returns the copy."""
    from tbdkit.results.index import Index

    results.mkdir(parents=True, exist_ok=True)
    target = results / run(role).name
    shutil.copytree(run(role), target, symlinks=True)
    if index:
        Index(results).add(target)
    return target


# ---------------------------------------------------------------------------------------------------- schema
# What a run folder's files look like, as the readers depend on it: the keys, columns and units a run of a
# stack writes (never its values, which each run measures anew).

NESTED = ("window", "warmup", "loss", "cpu_budget", "model_info", "compile", "compile_phase")  # summary's objects


def _keys(doc: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON document's objects (lists and values are leaves)."""
    if not isinstance(doc, dict):
        return set()
    out = set()
    for key, value in doc.items():
        out.add(prefix + key)
        out |= _keys(value, f"{prefix}{key}.")
    return out


def _columns(path: Path) -> list[str]:
    with path.open(newline="") as fh:
        return next(csv.reader(fh), [])


def schema_of(run_dir: Path) -> dict[str, Any]:
    """A run folder's schema: summary.json's keys (and those of its objects), each metric's unit, env.json's
    keys and its framework's, spec.json's and memory.json's key paths, the CSVs' columns, mllog.txt's keys,
    trace.json's event names (iterations as ProfilerStep#N) and otherData keys."""
    summary = json.loads((run_dir / "summary.json").read_text())
    out: dict[str, Any] = {
        "summary.json keys": sorted(summary),
        **{f"summary.json {k} keys": sorted(summary[k]) for k in NESTED if isinstance(summary.get(k), dict)},
        "summary.json metric units": {n: m.get("unit") for n, m in (summary.get("metrics") or {}).items()},
    }
    for name in ("env.json", "spec.json", "memory.json"):
        path = run_dir / name
        if path.is_file():
            doc = json.loads(path.read_text())
            if name == "env.json":  # the machine's own parts vary with the machine: their top level only
                out["env.json keys"] = sorted(doc)
                out["env.json framework keys"] = sorted(doc.get("framework") or {})
            else:
                out[f"{name} keys"] = sorted(k for k in _keys(doc) if not k.startswith("workload.files."))
    for name in ("iterations.csv", "samples.csv", "kernels.csv"):
        if (run_dir / name).is_file():
            out[f"{name} columns"] = _columns(run_dir / name)
    if (run_dir / "mllog.txt").is_file():
        lines = (run_dir / "mllog.txt").read_text().splitlines()
        out["mllog.txt keys"] = sorted({json.loads(x.removeprefix(":::MLLOG "))["key"] for x in lines})
    if (run_dir / "trace.json").is_file():
        doc = json.loads((run_dir / "trace.json").read_text())
        out["trace.json event names"] = sorted({re.sub(r"#\d+$", "#N", str(e.get("name")))
                                                for e in doc.get("traceEvents") or []})
        out["trace.json otherData keys"] = sorted(doc.get("otherData") or {})
    return out


# What the machine decides, not the kit: samples.csv has a column per instrument this machine has (a GPU's, RAPL's),
# and trace.json a counter per column, so a fresh run on another machine may add some; it may not lose one.
MACHINE_ADDS = frozenset({"samples.csv columns", "trace.json event names"})


def schema_differences(fresh: Path, corpus: Path) -> list[str]:
    """Where a fresh run folder's schema differs from a corpus run's: one line per part, naming what the
    fresh run added and lost (a unit changed is named with both)."""
    new, old = schema_of(fresh), schema_of(corpus)
    out = []
    for part in sorted(set(new) | set(old)):
        a, b = new.get(part), old.get(part)
        if part in MACHINE_ADDS and isinstance(a, list) and isinstance(b, list) and set(b) <= set(a):
            a = [c for c in a if c in b]  # the corpus' columns, in the fresh run's order
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            changed = {k: (b.get(k), a.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
            out.append(f"{part}: (corpus, fresh) {dict(sorted(changed.items()))}")
        elif isinstance(a, list) and isinstance(b, list) and set(a) == set(b):
            out.append(f"{part}: in another order: corpus {b}, fresh {a}")
        else:
            added, lost = sorted(set(a or []) - set(b or [])), sorted(set(b or []) - set(a or []))
            out.append(f"{part}: the fresh run adds {added} and lacks {lost}")
    return out
