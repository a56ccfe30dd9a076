"""Regenerate the corpus of real run folders (tests/corpus/runs/): real runs of each framework stack, made
through the kit's own runner (tbdkit.bench.run_list, what `tbdkit bench` calls), then listed by role in
tests/corpus/corpus.json. Run from the repository root with the kit's Python (tests/corpus/regenerate.sh).

Every run is MiniGo's smoke network at batch 2 on the CPU with short caps, so the whole corpus stays a few
hundred KB. What each role holds, and why its spec differs from `tbdkit bench`'s defaults, is in README.md."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tbdkit.bench.run_list import run_all
from tbdkit.spec import catalog
from tbdkit.spec import run_spec as specs

HERE = Path(__file__).resolve().parent
RUNS = Path(os.path.relpath(HERE / "runs"))  # relative: the run folders name their paths as the user typed them
MANIFEST = HERE / "corpus.json"
MODEL = "minigo"
# The machine that makes the corpus is shared (CI, other tests): a run that should be `ok` may not be
# flagged `disturbed` by its neighbours' load, so those runs raise the foreign-load limit (their summary's
# disturbance_rule says so); the `disturbed` role keeps the default limit beside a busy-loop neighbour.
QUIET = 64.0
# Short windows of a bounded number of iterations (the folders stay small on a fast machine too), a target the
# window never meets (it ends at a cap on every machine), and samples every 0.1 s (a window of a few tenths of a
# second still has its samples, its counters in trace.json): the same keys and columns wherever it runs.
CAPS = {"max_warmup_s": 2.0, "max_warmup_iterations": 10, "max_measure_s": 3.0, "max_measure_iterations": 30,
        "target_ci": 1e-6, "sample_interval_s": 0.1, "synthetic_pool": 2}  # a compile phase of 2 batches

# role -> (the spec's fields, the statuses the role must end with)
ROLES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "pytorch-standard": ({"framework": "pytorch"}, ("ok",)),
    "tensorflow-standard": ({"framework": "tensorflow"}, ("ok",)),
    "mxnet-standard": ({"framework": "mxnet"}, ("ok",)),
    "pytorch-compiled": ({"framework": "pytorch", "graph": "compiled"}, ("ok",)),
    "tensorflow-compiled": ({"framework": "tensorflow", "graph": "compiled"}, ("ok",)),
    "pytorch-bf16": ({"framework": "pytorch", "precision": "bf16"}, ("ok",)),
    "tensorflow-bf16": ({"framework": "tensorflow", "precision": "bf16"}, ("ok",)),
    "pytorch-data-parallel": ({"framework": "pytorch", "gpus_per_node": 2}, ("ok",)),
    "mxnet-disturbed": ({"framework": "mxnet", "neighbour": True}, ("disturbed",)),
    "pytorch-failed": ({"framework": "pytorch", "data": "EMPTY"}, ("failed",)),
}

SPIN = "import time\nt = time.time()\nwhile time.time() - t < 600: pass\n"


def spec_of(fields: dict[str, Any], empty: Path) -> specs.RunSpec:
    """The role's spec: `bench`'s for the smoke preset, with CAPS and the role's foreign-load limit."""
    fields = dict(fields)
    neighbour = fields.pop("neighbour", False)
    limit = specs.MeasurePolicy().foreign_cpu_limit if neighbour else QUIET
    if fields.get("data") == "EMPTY":  # a dataset folder that holds no games: the run fails, saying so
        fields["data"] = str(empty)
    measure = {**CAPS, "foreign_cpu_limit": limit}
    return specs.build(model=MODEL, batch_size=2, preset="smoke", device="cpu", measure=measure, **fields)


def outside_the_run(code: str) -> int:
    """The pid of a Python process running `code` that is no descendant of this one. run_all runs in this process,
    so this process is the run's launcher and its children are the run's own (tbdkit.agent.collectors.neighbours):
    a neighbour must be started by a child that exits at once, leaving it to init."""
    start = (
        "import subprocess, sys; "
        f"print(subprocess.Popen([sys.executable, '-c', {code!r}], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,"
        " stdin=subprocess.DEVNULL).pid)"
    )
    return int(subprocess.run([sys.executable, "-c", start], capture_output=True, text=True, check=True).stdout)


def make(role: str, results: Path, empty: Path) -> Path:
    fields, expected = ROLES[role]
    spec = spec_of(fields, empty)
    neighbours = [outside_the_run(SPIN) for _ in range(os.cpu_count() or 1)] if fields.get("neighbour") else []
    try:
        (summary,) = run_all([spec], results, catalog.get(MODEL).throughput_unit, quiet_stdout=True)
    finally:
        for pid in neighbours:
            os.kill(pid, signal.SIGKILL)
    run = results / summary["run_id"]
    if summary["status"] not in expected:
        shutil.rmtree(run)
        raise RoleFailed(f"{role}: ended {summary['status']} ({summary.get('error')}), not {' or '.join(expected)}")
    return run


class RoleFailed(Exception):
    """A role's run did not end as the role needs (its folder is removed; the corpus keeps the previous one)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("roles", nargs="*", help=f"the roles to remake (default: all): {', '.join(ROLES)}")
    args = parser.parse_args(argv)
    roles = args.roles or list(ROLES)
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        parser.error(f"unknown role(s) {', '.join(unknown)}: choose from {', '.join(ROLES)}")
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else {}
    RUNS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tbdkit-corpus-") as tmp:
        empty = Path(tmp) / "empty-dataset"
        empty.mkdir()
        failed = []
        for role in roles:
            started = time.monotonic()
            old = manifest.get(role)
            try:
                run = make(role, RUNS, empty)
            except RoleFailed as exc:
                print(exc, flush=True)
                failed.append(role)
                continue
            if old and (RUNS / old).is_dir():
                shutil.rmtree(RUNS / old)
            manifest = {**(json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else {}), role: run.name}
            MANIFEST.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")
            print(f"{role}: {run.name} ({time.monotonic() - started:.0f} s)", flush=True)
    (RUNS / "index.sqlite").unlink(missing_ok=True)  # rebuilt from the folders by every reader
    if failed:
        print(f"not remade: {', '.join(failed)} (their previous folders are kept)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
