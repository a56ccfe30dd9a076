"""The corpus of real run folders (tests/corpus/: made by real runs of each stack, remade by
tests/corpus/regenerate.sh), by role: what the tests of readers (report, bundle, reproduce, trace, mllog,
compare, index) read instead of run folders built by hand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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
