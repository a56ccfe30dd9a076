"""README.md's and ARTIFACT.md's commands as a user types them, in a shell, with the default relative
folders: in a copy of this working tree (its committed and untracked files; the kit's environment and the
framework stacks linked in, never written), from its root and from an unpacked bundle.

One walk, shared by the tests: `make kick-the-tires BUDGET=120` end to end (every stack's smoke run on the
CPU as far as the budget goes, the trace, the report and the bundle), then every row of its bundle's ARTIFACT.md "Commands, and where to type
them" table in the folder that row names (`tbdkit reproduce artifact.tar.gz` re-runs the bundle's runs into
`results/`, `make report` reports them, `tbdkit report results ...` in the unpacked bundle regenerates its
report), then README's read commands over the `results/` folder that `reproduce` filled (`make report`,
`tbdkit report`, `tbdkit report results`, `tbdkit report ./results`, `tbdkit runs`, `tbdkit show last`,
`make bundle`). The runs are whatever this machine gives: beside other tests they end `disturbed`, which the
walk must survive. README's `make bench MODEL=deepspeech2` itself is not run (4 to 5 minutes of training on
two cores at the smoke preset's caps): `reproduce` fills `results/` through the same bench machinery.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tbdkit.bench import kick
from tbdkit.core.paths import KIT_ROOT
from run_invariants import assert_run_holds

TIMEOUT_S = 1500
STAMP = ".tbdkit-installed"  # the Makefile's mark that .venv is installed (KIT_STAMP)
KEPT_ENV = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", "TERM", "PIP_CACHE_DIR", "UV_CACHE_DIR")


def _tree(root: Path) -> list[str]:
    """The working tree's files as a clone would hold them, with what is not committed yet."""
    if shutil.which("git") and (root / ".git").exists():
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout.decode()
        return [p for p in out.split("\0") if p and (root / p).is_file() and not (root / p).is_symlink()]
    skip = {".git", ".venv", ".venvs", "__pycache__", ".pytest_cache", "results", "report"}
    return [str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(root).parts)]


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """A copy of the kit as a user's clone after `make`: its files, .venv a folder of links to the installed
    environment's parts with a stamp of its own (so make installs nothing), .venvs a link to the stacks."""
    installed = KIT_ROOT / ".venv"
    if not (installed / STAMP).is_file():
        pytest.fail(f"{installed} is not installed by `make` (no {STAMP}): run `make` first")
    kit = tmp_path_factory.mktemp("clone") / "tbdkit"
    for name in _tree(KIT_ROOT):
        (kit / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(KIT_ROOT / name, kit / name)
    venv = kit / ".venv"
    venv.mkdir()
    for entry in installed.resolve().iterdir():
        if entry.name != STAMP:
            (venv / entry.name).symlink_to(entry)
    (venv / STAMP).touch()
    (kit / ".venvs").symlink_to((KIT_ROOT / ".venvs").resolve())
    return kit


def typed(command: str, cwd: Path, kit: Path) -> subprocess.CompletedProcess:
    """`command` in a shell, as a user types it in `cwd`: the kit's .venv/bin on PATH (as after
    `source .venv/bin/activate`), no make or tbdkit variable inherited from the test run; a question is
    answered yes."""
    env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
    env.update(PATH=f"{kit / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(kit),
               COLUMNS="200")
    proc = subprocess.run(command, shell=True, cwd=cwd, env=env, input="y\n" * 4, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    print(f"$ {command}  (in {cwd}, exit {proc.returncode})\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def _ok(proc: subprocess.CompletedProcess, command: str) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{command}: exit {proc.returncode}\n{out[-6000:]}"
    assert "Traceback" not in out, f"{command}\n{out[-6000:]}"
    return " ".join(out.split())


def _readme() -> str:
    return (KIT_ROOT / "README.md").read_text()


def commands_table(guide: str) -> list[tuple[str, str]]:
    """ARTIFACT.md's "Commands, and where to type them": (where, command) per row."""
    section = guide.split("## Commands, and where to type them\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`") and cells[0] not in ("where", "---"):
            rows.append((cells[0], cells[1].strip("`")))
    return rows


KICK = "make kick-the-tires"  # as ARTIFACT.md's commands table names it
# on CI's 2 cores PyTorch's smoke run fits, TensorFlow's is cut by the deadline or skipped: partial results
BUDGET = 120
KICKED: dict[str, float] = {}


@pytest.fixture(scope="module")
def kicked(kit) -> str:
    """`make kick-the-tires BUDGET=120`, as README names it (`kick-the-tires` ... inside `BUDGET` seconds), in
    the kit's folder: the one end-to-end run of kick-the-tires in the suite."""
    readme = _readme()
    assert "`kick-the-tires`" in readme and "`BUDGET`" in readme
    command = f"{KICK} BUDGET={BUDGET}"
    start = time.monotonic()
    proc = typed(command, kit, kit)
    KICKED["wall_s"] = time.monotonic() - start
    return _ok(proc, command)


def finished_runs(results: Path) -> list[str]:
    """The runs of a results folder that finished with their numbers (ok or disturbed), each run of it
    (finished or cut by the budget) checked whole (tests/run_invariants.py)."""
    runs = {p.parent.name: assert_run_holds(p.parent)["status"] for p in results.glob("*/summary.json")}
    return sorted(name for name, status in runs.items() if status in ("ok", "disturbed"))


@pytest.fixture(scope="module")
def walked(kit, kicked) -> dict[str, str]:
    """Every row of the kick-the-tires bundle's ARTIFACT.md commands table, in the folder it names, in the
    table's order; `make kick-the-tires` has run already. {command: its output}."""
    bundle = kit / "results-kick-the-tires.tar.gz"
    shutil.copy(bundle, kit / "artifact.tar.gz")  # "this bundle copied there as artifact.tar.gz"
    unpacked = kit.parent / "evaluator"
    unpacked.mkdir()
    shutil.copy(bundle, unpacked / "artifact.tar.gz")
    _ok(typed("tar xzf artifact.tar.gz", unpacked, kit), "tar xzf artifact.tar.gz")
    guide = (unpacked / "tbdkit-artifact" / "ARTIFACT.md").read_text()
    rows = commands_table(guide)
    assert rows and ("the kit's folder", KICK) in rows, guide
    outputs = {KICK: kicked}
    for where, command in rows:
        if command in outputs:
            continue
        if where.startswith("the unpacked bundle"):
            assert "`tar xzf artifact.tar.gz && cd tbdkit-artifact`" in where, where
            cwd = unpacked / "tbdkit-artifact"
        elif where.startswith("the kit's folder"):
            cwd = kit
        else:
            pytest.fail(f"ARTIFACT.md names a folder this test does not know: {where!r} (for `{command}`)")
        outputs[command] = _ok(typed(command, cwd, kit), command)
    return outputs


def test_make_kick_the_tires_stops_inside_its_budget_with_partial_results_and_a_table(kit, kicked):
    """Each step ran, or the budget stopped or skipped it (said in its table); the budget held; at least one
    smoke run finished, and the report and the bundle over the partial results were made in the reserve kept
    for them; the final table, printed and kept, names every step."""
    folder = kit / "results-kick-the-tires"
    doc = json.loads((folder / kick.FOLDER / "steps.json").read_text())
    steps = {s["step"]: s for s in doc["steps"]}
    assert list(steps) == ["smoke-pytorch", "smoke-tensorflow", "smoke-mxnet", "trace", "report", "bundle"]
    assert all(s["status"] in ("ok", "timeout", "skipped") for s in steps.values()), steps
    # the budget held: the steps' clock, and the whole command with make, its start and the stacks' check around it
    assert doc["elapsed_s"] <= BUDGET and KICKED["wall_s"] <= BUDGET + 60, (doc["elapsed_s"], KICKED)
    assert all(s["seconds"] <= s["cap_s"] + 1 for s in steps.values()), steps
    assert finished_runs(folder) and steps["smoke-pytorch"]["runs"], steps["smoke-pytorch"]
    assert steps["report"]["status"] == steps["bundle"]["status"] == "ok", steps
    assert (kit / "results-kick-the-tires-report" / "report.html").is_file()
    with tarfile.open(kit / "results-kick-the-tires.tar.gz") as tar:
        names = tar.getnames()
    assert "tbdkit-artifact/report/report.html" in names and "tbdkit-artifact/ARTIFACT.md" in names  # the report is in it
    table = (folder / kick.FOLDER / "table.txt").read_text()
    assert "kick-the-tires — results-kick-the-tires" in kicked
    for name, s in steps.items():
        assert name in kicked and name in table
        if s["status"] == "skipped":
            assert s["note"].startswith("deadline:") or "no run finished" in s["note"], s


def test_artifact_md_commands_run_as_typed_where_it_says(kit, walked):
    """reproduce re-runs every bundled run, disturbed ones too (a machine running other tests is never
    quiet), with a verdict per run; the report of the re-runs and the bundle's regenerated report are made."""
    assert "nothing to reproduce" not in walked["tbdkit reproduce artifact.tar.gz"]
    recorded = finished_runs(kit / "results-kick-the-tires")
    (written,) = kit.glob("results/reproduce-*.json")
    points = json.loads(written.read_text())["points"]
    assert sorted(p["recorded_run"] for p in points) == recorded
    for p in points:
        assert p["new_status"] in ("ok", "disturbed") and p["verdict"] in ("reproduced", "not reproduced", "not comparable")
        assert ("disturbed" in p) == ("disturbed" in (p["recorded_status"], p["new_status"])), p
    made = finished_runs(kit / "results")
    assert f"{len(made)} run(s) from" in (kit / "report" / "report.md").read_text()  # `make report` over the re-runs
    regenerated = kit.parent / "evaluator" / "tbdkit-artifact" / "regenerated" / "report.md"
    assert regenerated.is_file() and f"{len(recorded)} run(s) from" in regenerated.read_text()


# README's spellings (its Commands table and Make targets), each with the commands typed for it.
README_COMMANDS = {
    "`report`, `bundle` (writes `artifact.tar.gz`)": ["make report", "make bundle"],
    "`tbdkit report [RESULTS]`": ["tbdkit report", "tbdkit report results", "tbdkit report ./results"],
    "`tbdkit runs`": ["tbdkit runs"],
    "`tbdkit show RUN`": ["tbdkit show last", "tbdkit show last --trace"],
}


def test_readme_commands_from_the_repo_root_read_the_default_results_folder(kit, walked):
    readme = _readme()
    made = finished_runs(kit / "results")  # by reproduce: one a framework
    assert made
    for spelling, commands in README_COMMANDS.items():
        assert spelling in readme, f"README.md no longer says {spelling}: update this test's commands"
        for command in commands:
            out = _ok(typed(command, kit, kit), command)
            if command.startswith(("make report", "tbdkit report")):
                assert "holds no run" not in out and f"{len(made)} run(s) in {len(made)} group(s)" in out, (command, out)
    with tarfile.open(kit / "artifact.tar.gz") as tar:
        runs = {n.split("/")[2] for n in tar.getnames() if n.startswith("tbdkit-artifact/results/") and n.count("/") > 2}
    assert set(made) <= runs
