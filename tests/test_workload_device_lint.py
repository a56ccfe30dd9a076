"""A lint over the PyTorch workload code: `.numpy()` on a tensor that may live on the GPU fails
there ("can't convert cuda tensor to numpy"), so every `.numpy()` must come after a `.cpu()` in
the same chain (`x.cpu().numpy()`, `x.detach().cpu().numpy()`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "workloads"
TORCH_FILES = sorted([*ROOT.glob("*/pytorch.py"), *ROOT.glob("_*/torch_*.py")])


def unguarded_numpy(source: str) -> list[int]:
    """Lines with a `.numpy()` call whose receiver chain has no `.cpu()` call."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "numpy"):
            continue
        receiver, guarded = node.func.value, False
        while isinstance(receiver, (ast.Call, ast.Attribute, ast.Subscript)):
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) and receiver.func.attr == "cpu":
                guarded = True
                break
            receiver = receiver.func if isinstance(receiver, ast.Call) else receiver.value
        if not guarded:
            bad.append(node.lineno)
    return bad


def test_the_lint_tells_guarded_from_unguarded() -> None:
    assert unguarded_numpy("a = x.numpy()\nb = x.detach().numpy()\n") == [1, 2]
    assert unguarded_numpy("a = x.cpu().numpy()\nb = x.float().detach().cpu().numpy()\nc = torch.from_numpy(a)\n") == []


@pytest.mark.parametrize("path", TORCH_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pytorch_workloads_copy_to_the_cpu_before_numpy(path: Path) -> None:
    lines = unguarded_numpy(path.read_text())
    assert not lines, f"{path.relative_to(ROOT)}: .numpy() without .cpu() at lines {lines}"
