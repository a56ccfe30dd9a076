"""The house in layers (docs/architecture.md): every module of tbdkit/ lives in a package of a rank, and a
package imports only packages of a lower rank, never one of its own rank nor a higher one. Every import is
walked, top-level or inside a function, and so is every `importlib.import_module("tbdkit....")` written as a
string. The agent's entry point, started in a fresh interpreter, loads none of the host's machinery."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from test_import_cycles import import_graph, modules

ROOT = Path(__file__).resolve().parent.parent / "tbdkit"

# A package may import only packages of a lower rank.
RANKS = {
    "core": 0,
    "env": 1,
    "spec": 2,
    "results": 3,
    "analysis": 4,
    "adapters": 5,
    "agent": 6,
    "describe": 6,
    "launch": 6,
    "calibrate": 7,
    "bench": 7,
    "report": 7,
    "artifact": 8,
    "cli": 9,
}
# The modules directly under tbdkit/: the package itself (the old flat names, resolved lazily) and `python -m tbdkit`.
TOP_LEVEL = {"tbdkit", "tbdkit.__main__"}
# What the agent's process must never load: the host's installer and stacks, launchers, bench, report, the CLI.
NOT_IN_THE_AGENT = (
    "tbdkit.env.stacks",
    "tbdkit.env.installer",
    "tbdkit.env.lockgen",
    "tbdkit.launch",
    "tbdkit.bench",
    "tbdkit.report",
    "tbdkit.cli",
)


def string_imports(root: Path) -> dict[str, set[str]]:
    """Module -> the tbdkit modules it names in `importlib.import_module("tbdkit....")` (or `import_module`)."""
    mods = modules(root)
    found: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            target = node.args[0].value
            if name == "import_module" and isinstance(target, str) and target.startswith(root.name + "."):
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != m:
                    found[m].add(target)
    return found


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANKS else None


def violations(root: Path) -> list[str]:
    """Every import that runs into the same rank or up, and every module that lies in no ranked package."""
    graph = import_graph(root)
    for m, targets in string_imports(root).items():
        graph[m] |= targets
    out = []
    for m in sorted(graph):
        here = package_of(m)
        if here is None:
            if m not in {t.replace("tbdkit", root.name, 1) for t in TOP_LEVEL}:
                out.append(f"{m} lies in no package of a rank")
            continue
        for t in sorted(graph[m]):
            there = package_of(t)
            if there is None or there == here:
                continue
            if RANKS[there] >= RANKS[here]:
                out.append(f"{m} ({here}, rank {RANKS[here]}) imports {t} ({there}, rank {RANKS[there]})")
    return out


def test_every_package_has_a_rank():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(RANKS)


def test_imports_run_only_downwards():
    found = violations(ROOT)
    assert found == [], "imports into a package of the same or a higher rank:\n" + "\n".join(found)


def test_the_walk_finds_an_upward_import(tmp_path):
    pkg = tmp_path / "tbdkit"
    for name, text in {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/a.py": "def f():\n    from tbdkit.cli import main\n",
        "env/__init__.py": "",
        "env/b.py": "import importlib\nX = importlib.import_module('tbdkit.spec.c')\n",
        "spec/__init__.py": "",
        "spec/c.py": "from ..core import a\n",
        "bench/__init__.py": "",
        "bench/d.py": "from tbdkit.report import e\n",
        "report/__init__.py": "",
        "report/e.py": "",
        "cli/__init__.py": "",
        "cli/main.py": "from tbdkit.bench import d\n",
        "flat.py": "",
    }.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    assert violations(pkg) == [
        "tbdkit.bench.d (bench, rank 7) imports tbdkit.report.e (report, rank 7)",
        "tbdkit.core.a (core, rank 0) imports tbdkit.cli.main (cli, rank 9)",
        "tbdkit.env.b (env, rank 1) imports tbdkit.spec.c (spec, rank 2)",
        "tbdkit.flat lies in no package of a rank",
    ]


def test_the_agent_process_loads_none_of_the_host_machinery():
    """`python -m tbdkit.agent` imports its entry point (tbdkit/agent/__main__.py), then what it runs: in a
    fresh interpreter, that and every module of tbdkit/agent/ and tbdkit/adapters/ (those whose framework is
    not installed here are left out) load none of the installer, stacks, lockgen, launchers, bench, report
    or CLI."""
    agent_side = sorted(
        m for m in modules(ROOT) if m.startswith(("tbdkit.agent", "tbdkit.adapters")) and not m.endswith("__main__")
    )
    probe = (
        "import importlib, json, sys\n"
        "import tbdkit.agent.__main__\n"
        f"for name in {agent_side!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError as exc:  # a framework this interpreter lacks (torch, tensorflow, mxnet)\n"
        "        assert (exc.name or '').split('.')[0] not in ('tbdkit',), exc\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tbdkit'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT.parent
    ).stdout
    loaded = json.loads(out.strip().splitlines()[-1])
    assert {"tbdkit.agent.run", "tbdkit.agent.after_window", "tbdkit.agent.collectors"} <= set(loaded)
    bad = [m for m in loaded if any(m == n or m.startswith(n + ".") for n in NOT_IN_THE_AGENT)]
    assert bad == []


def test_the_architecture_page_shows_these_layers():
    """docs/architecture.md's table of the layers names every package with its rank, as RANKS does."""
    import re

    text = (ROOT.parent / "docs" / "architecture.md").read_text()
    shown = {m.group(2): int(m.group(1)) for m in re.finditer(r"^\| (\d+) \| `([a-z]+)/` \|", text, re.M)}
    assert shown == RANKS


def test_a_prepared_gpu_script_s_imports_resolve():
    """The modules a prepared GPU script imports, by their packages, and tbdkit.spec's own names resolve in
    a fresh interpreter; the flat layout's old names are gone (no map of moved modules)."""
    probe = (
        "from tbdkit import spec as specs\n"
        "from tbdkit.bench import reference as ref\n"
        "from tbdkit.env import stacks, locks\n"
        "from tbdkit.spec import catalog, run_spec\n"
        "assert specs.load is run_spec.load and specs.RunSpec is run_spec.RunSpec\n"
        "assert callable(ref.ncu_pass) and ref.NCU_WARMUP_S > 0 and 'deepspeech2' in ref.suite()\n"
        "assert stacks.STACKS and locks.MARKER and catalog.get('resnet50')\n"
        "import tbdkit\n"
        "assert not hasattr(tbdkit, 'MOVED') and not hasattr(tbdkit, 'stacks')\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, cwd=ROOT.parent)
