"""No module outside tbdkit/results/ spells a run file's name: they take it from tbdkit.results.files
(or a RunDir's properties), so renaming a file or adding one is a change in one place.

Every string constant of tbdkit/ (but tbdkit/results/) that is not a docstring is compared with the
file names tbdkit.results.files holds (its RUN_FILES, SWEEP_STATE and any other name with a suffix);
a message that mentions a file inside a longer sentence is not a name spelled as a path, and passes."""

from __future__ import annotations

import ast
from pathlib import Path

from tbdkit.results import files

ROOT = Path(__file__).resolve().parent.parent / "tbdkit"
OWNER = ROOT / "results"


def file_names() -> set[str]:
    """Every file name files.py declares: the RUN_FILES and each module-level str constant with a suffix."""
    names = set(files.RUN_FILES)
    names.update(v for k, v in vars(files).items() if k.isupper() and isinstance(v, str) and "." in v)
    return names


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module, its classes and its functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def spelled(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) for each string constant of `source` equal to one of `names`, docstrings excepted."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
            and id(node) not in skip]


def test_the_walk_finds_a_spelled_name_and_passes_docstrings_and_sentences():
    source = ('"""Writes summary.json."""\n'
              'def f(d):\n'
              '    """summary.json"""\n'
              '    print("see log.txt")\n'
              '    return d / "summary.json"\n')
    assert spelled(source, {"summary.json", "log.txt"}) == [(5, "summary.json")]


def test_the_names_include_every_run_file_and_the_sweep_state():
    assert files.RUN_FILES <= file_names() and files.SWEEP_STATE in file_names()


def test_no_run_file_name_is_spelled_outside_results():
    names = file_names()
    found = [f"{path.relative_to(ROOT.parent)}:{line}: {name!r}"
             for path in sorted(ROOT.rglob("*.py")) if OWNER not in path.parents
             for line, name in spelled(path.read_text(), names)]
    assert found == [], "run-file names spelled outside tbdkit/results/ (use tbdkit.results.files or RunDir): " \
                        + "; ".join(found)
