"""The README stays a short front page: at most 200 lines of at most 200 characters, every Make variable a user can set is
in it, every relative link in it and in docs/ leads to a file (and heading) that exists, docs/README.md links
every document, its GPU section
says how each GPU path is tested, and every test docs/gpu-testing.md names exists."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from model_checks import functions_defined

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 200
MAX_LINE_CHARS = 200

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")


def markdown_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def links(text: str) -> list[str]:
    """The link targets of a Markdown text, outside code blocks and code spans."""
    return _LINK.findall(_CODE.sub("", _FENCE.sub("", text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    return broken


def make_variables() -> list[str]:
    return re.findall(r"^([A-Z][A-Z0-9_]*)\s*\?=", (ROOT / "Makefile").read_text(), re.M)


def long_lines(text: str, limit: int = MAX_LINE_CHARS) -> list[str]:
    """Where a text's lines pass `limit` characters: 'line N: C characters' each."""
    return [f"line {n}: {len(line)} characters" for n, line in enumerate(text.splitlines(), 1) if len(line) > limit]


def test_readme_is_at_most_200_lines_of_at_most_200_characters() -> None:
    """A front page read on a terminal or a narrow pane: a line may not stand in for a paragraph."""
    text = README.read_text()
    lines = len(text.splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines; move depth into docs/"
    assert not long_lines(text), f"README.md: {long_lines(text)}; wrap them or move depth into docs/"


def test_a_long_line_is_found() -> None:
    assert long_lines("short\n" + "x" * 201 + "\n" + "y" * 200) == ["line 2: 201 characters"]


def support_matrix(text: str) -> dict[str, set[str]]:
    """The README's support matrix: each model of a row and the frameworks its row says `yes` for."""
    section = text.split("## Support matrix", 1)[1].split("\n## ", 1)[0]
    rows = [r.split("|")[1:-1] for r in section.splitlines() if r.startswith("| `")]
    frameworks = ("pytorch", "tensorflow", "mxnet")
    return {name: {fw for fw, cell in zip(frameworks, r[1:4]) if cell.strip() == "yes"}
            for r in rows for name in re.findall(r"`(\w+)`", r[0])}


def test_the_support_matrix_is_the_catalogs() -> None:
    """Every model the kit has is in the README's support matrix, with `yes` exactly for the frameworks it has a
    workload file for (a file added, removed or renamed changes what runs)."""
    from tbdkit.spec import catalog

    from tbdkit.core.frameworks import PAPER_FRAMEWORKS

    matrix = support_matrix(README.read_text())
    # the machinery check's model (framework numpy, no paper framework) is named under Commands, not in the matrix
    # a user's folder (--workloads) is not the kit's to list
    frameworks = {name: set(model.frameworks) & set(PAPER_FRAMEWORKS) for name, model in catalog.models().items()
                  if model.origin == "kit"}
    assert matrix == {name: fws for name, fws in frameworks.items() if fws}


def test_a_support_matrix_row_may_name_several_models() -> None:
    text = "## Support matrix\n| model | a | b | c | r |\n|---|\n| `x` `y` | yes | not yet | no | r |\n## Next\n| `z` |"
    assert support_matrix(text) == {"x": {"pytorch"}, "y": {"pytorch"}}


def test_every_make_variable_is_in_the_readme() -> None:
    names = make_variables()
    assert "MODEL" in names and "REPORT" in names, names  # the pattern still reads the Makefile
    text = README.read_text()
    missing = [name for name in names if f"`{name}`" not in text]
    assert not missing, f"Make variables missing from README.md: {missing}"


def test_relative_links_in_readme_and_docs_lead_somewhere() -> None:
    broken = [b for path in markdown_files() for b in broken_links(path)]
    assert not broken, "\n".join(broken)



def unlisted_documents(docs: Path) -> list[str]:
    """The documents of `docs` that its README.md (the index the README sends readers to) does not link."""
    listed = {Path(t.partition("#")[0]).name for t in links((docs / "README.md").read_text())}
    return sorted(p.name for p in docs.glob("*.md") if p.name != "README.md" and p.name not in listed)


def test_the_docs_index_lists_every_document(tmp_path: Path) -> None:
    assert unlisted_documents(ROOT / "docs") == [], "docs/README.md does not link these documents"
    (tmp_path / "README.md").write_text("- [a.md](a.md): one\n- `b.md` in code is no link\n")
    for name in ("a.md", "b.md", "c.md"):
        (tmp_path / name).write_text("# x\n")
    assert unlisted_documents(tmp_path) == ["b.md", "c.md"]

def test_a_missing_file_or_heading_is_found(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "a.md"
    page.write_text("# A page\n\n[ok](#a-page) [gone](b.md) [no heading](#elsewhere) "
                    "[web](https://example.org) `[code](c.md)`\n")
    assert broken_links(page) == ["docs/a.md: b.md (no such file)", "docs/a.md: #elsewhere (no such heading)"]


def test_slug_matches_githubs_anchors() -> None:
    assert slug("Memory breakdown (`memory.json`)") == "memory-breakdown-memoryjson"
    assert slug("FP32 utilization (eq. 2) over the whole iteration") == "fp32-utilization-eq-2-over-the-whole-iteration"
    assert slug("Training to a target: the `converge` preset") == "training-to-a-target-the-converge-preset"


_TEST_REF = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")


def named_tests(text: str) -> list[tuple[str, str | None]]:
    """The test files and test functions a page names as `tests/x.py` or `tests/x.py::test_y`."""
    return [(path, name or None) for path, name in _TEST_REF.findall(text)]


def missing_tests(text: str, root: Path) -> list[str]:
    missing = []
    for path, name in named_tests(text):
        file = root / path
        if not file.is_file():
            missing.append(f"{path} (no such file)")
        elif name and name not in functions_defined(file):
            missing.append(f"{path}::{name} (no such test)")
    return missing


def test_every_test_the_gpu_testing_page_names_exists() -> None:
    """docs/gpu-testing.md says which test covers each GPU path: each must exist, so a renamed or
    deleted test cannot leave a GPU path claimed as tested."""
    text = (ROOT / "docs" / "gpu-testing.md").read_text()
    assert len(named_tests(text)) >= 15, named_tests(text)
    assert not missing_tests(text, ROOT)


def test_a_renamed_test_on_the_gpu_testing_page_is_found(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_here():\n    pass\n")
    text = "`tests/test_a.py::test_here`, `tests/test_a.py::test_gone`, `tests/test_b.py`"
    assert missing_tests(text, tmp_path) == ["tests/test_a.py::test_gone (no such test)", "tests/test_b.py (no such file)"]


def test_the_readme_says_how_each_gpu_path_is_tested_without_a_gpu() -> None:
    section = README.read_text().split("## What runs on a GPU", 1)[1].split("\n## ", 1)[0]
    assert "| GPU path | How it is tested without a GPU |" in section
    assert "docs/gpu-testing.md" in section

