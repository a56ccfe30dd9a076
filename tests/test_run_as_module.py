"""Every module the kit runs with `python -m` (in its rendered jobs, images, Makefile and docs) is one its package
does not import: runpy otherwise warns, in every job's log, that the module "may result in unpredictable
behaviour", as it did for tbdkit.launch.outcome and tbdkit.launch.node."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHERE = ("tbdkit", "docs", "docker", "Makefile", "README.md", ".ci")
RUN_AS_MODULE = re.compile(r"-m (tbdkit(?:\.[a-z_]+)+)")


def modules_run() -> set[str]:
    found: set[str] = set()
    for place in WHERE:
        path = ROOT / place
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and p.suffix != ".pyc"]
        for f in files:
            found.update(RUN_AS_MODULE.findall(f.read_text(errors="replace")))
    return found


def test_no_module_run_with_python_m_is_imported_by_its_package():
    modules = sorted(modules_run())
    assert "tbdkit.launch.node" in modules and "tbdkit.launch.finish_rendered" in modules, modules
    probe = (
        "import importlib, json, sys\n"
        "found = []\n"
        "for m in json.loads(sys.argv[1]):\n"
        "    importlib.import_module(m.rsplit('.', 1)[0])\n"
        "    found += [m] if m in sys.modules else []\n"
        "print(json.dumps(found))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe, json.dumps(modules)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == [], "imported by their packages, so `python -m` warns: " + proc.stdout
