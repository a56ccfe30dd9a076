"""The workloads' shared package: one place for what the workload files share, reached through the
import path the catalog sets once (no workload file edits sys.path)."""

import re
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"


def test_no_workload_file_edits_the_import_path() -> None:
    edits = [f"{p.relative_to(WORKLOADS)}:{n}" for p in sorted(WORKLOADS.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bsys\.path\b", line)]
    assert edits == []


def test_the_shared_code_lives_in_one_package() -> None:
    shared = sorted(p.name for p in WORKLOADS.iterdir() if p.is_dir() and p.name.startswith("_"))
    assert shared == ["_shared"], shared
    assert (WORKLOADS / "_shared" / "__init__.py").is_file()


def test_every_reader_raises_the_one_shared_data_error() -> None:
    from tbdkit import catalog
    from workload_data import load_data

    readers = {m: load_data(m) for m in catalog.models()}
    from _shared.errors import DataError  # on the path now, as the catalog's loader puts it

    assert {m: d.DataError is DataError for m, d in readers.items()} == {m: True for m in readers}


def test_the_kit_tells_the_shared_data_error_from_a_lookalike() -> None:
    from tbdkit import catalog
    from workload_data import load_data

    shared = load_data("deepspeech2").DataError
    lookalike = type("DataError", (Exception,), {})
    assert catalog.is_data_error(shared("no utterances: pass a LibriSpeech folder"))
    assert not catalog.is_data_error(lookalike("x")) and not catalog.is_data_error(ValueError("x"))
