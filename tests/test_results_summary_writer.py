"""summary.json has one writer (tbdkit.results.summary.write, and `record` for what a launcher adds):
no other module of the kit writes it; the status is one enumeration and its exit codes are mapped once."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from tbdkit.results import summary as summaries
from tbdkit.results.summary import Status

KIT = Path(__file__).resolve().parents[1] / "tbdkit"
WRITER = "results/summary.py"


def _names_the_summary(node: ast.AST) -> bool:
    """A path that is summary.json: the SUMMARY constant, the literal, or a run folder's `.summary`."""
    return any(
        (isinstance(sub, ast.Name) and sub.id == "SUMMARY")
        or (isinstance(sub, ast.Attribute) and sub.attr in {"SUMMARY", "summary"})
        or (isinstance(sub, ast.Constant) and sub.value == "summary.json")
        for sub in ast.walk(node)
    )


def _summary_paths(tree: ast.AST) -> set[str]:
    """Names bound to a path that is summary.json (`path = run_dir / SUMMARY`), to follow them to a write."""
    return {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
        and any((isinstance(sub, ast.Name) and sub.id == "SUMMARY")
                or (isinstance(sub, ast.Attribute) and sub.attr == "SUMMARY")
                or (isinstance(sub, ast.Constant) and sub.value == "summary.json") for sub in ast.walk(node.value))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }


# A call that writes or moves a file to the path of its first argument (or its second: os.replace, shutil's).
WRITES_FIRST = {"open", "replace", "rename"}
WRITES_SECOND = {"replace", "rename", "move", "copy", "copy2", "copyfile"}


def summary_writes(tree: ast.AST) -> list[int]:
    paths = _summary_paths(tree)

    def names(node: ast.AST) -> bool:
        return _names_the_summary(node) or any(isinstance(sub, ast.Name) and sub.id in paths for sub in ast.walk(node))

    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if not (name.startswith("write") or name in WRITES_FIRST | WRITES_SECOND):
            continue
        if name == "open" and not any(isinstance(a, ast.Constant) and "w" in str(a.value) for a in node.args):
            continue
        targets = node.args[:1] if name not in WRITES_SECOND else node.args[:2]
        receiver = func.value if isinstance(func, ast.Attribute) and (name.startswith("write") or name in WRITES_FIRST) else None
        if any(names(a) for a in targets) or (receiver is not None and names(receiver)):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_module_but_the_results_layer_writes_summary_json():
    found = [
        f"{path.relative_to(KIT)}:{line}"
        for path in sorted(KIT.rglob("*.py"))
        if path.relative_to(KIT).as_posix() != WRITER
        for line in summary_writes(ast.parse(path.read_text()))
    ]
    assert found == [], "write summary.json through tbdkit.results.summary.write/record: " + ", ".join(found)


def test_the_scan_finds_a_hand_written_summary():
    code = "rd.write_json(runfiles.SUMMARY, s)\nRunDir(d).write_json(SUMMARY, s)\n(d / 'summary.json').write_text(t)\nrd.summary.write_text(t)\n"
    assert summary_writes(ast.parse(code)) == [1, 2, 3, 4]
    # through a name, a function imported by name, a rename onto it, a copy: each a write of summary.json
    code = ("target = run_dir / SUMMARY\nsink.write_json(target, s)\nwrite_json_atomic(run_dir / SUMMARY, s)\n"
            "os.replace(tmp, target)\nshutil.copy2(elsewhere, d / 'summary.json')\nf.write(json.dumps(summary))\n")
    assert summary_writes(ast.parse(code)) == [2, 3, 4, 5]


def test_record_merges_what_the_launcher_knows(tmp_path):
    summary = {"run_id": "r", "status": "ok", "model": "m", "framework": "pytorch",
               "metrics": {"throughput": {"value": 2.0, "unit": "x/s"}}}
    summaries.write(tmp_path, summary)
    merged = summaries.record(tmp_path, summary, status=Status.FAILED.value, metrics={"scaling_efficiency": {"value": None}})
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == merged and on_disk["status"] == "failed"
    assert set(on_disk["metrics"]) == {"throughput", "scaling_efficiency"}
    assert summary["status"] == "ok"  # the caller's dict is not changed


def test_status_and_exit_codes_are_mapped_once():
    assert summaries.STATUSES == ("ok", "disturbed", "oom", "interrupted", "failed")
    assert [summaries.exit_code(s) for s in summaries.STATUSES] == [0, 0, 3, 130, 1]
    assert summaries.exit_code("something new") == 1
    assert summaries.exit_code_of(["ok", "disturbed"]) == 0
    assert summaries.exit_code_of(["ok", "interrupted", "failed"]) == 130
    assert summaries.exit_code_of(["ok", "oom"]) == 1
