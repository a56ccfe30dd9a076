"""Commands the kit shows or composes are shell-quoted: `data prepare`'s suggestion, the
Makefile's recipes and log.txt's first line each give a path with a space, `;`, quotes or `$(..)`
to the CLI as one argument, and run nothing else."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tbdkit.spec import run_spec as specs
from tbdkit.launch import native
from tbdkit.core.paths import KIT_ROOT

ODD = ["a b;touch PWNED", "it's $(touch PWNED) `id` \"q\"", "x&&y|z>w", "$(shell touch PWNED)"]


def _argv_stub(tmp_path: Path) -> Path:
    stub = tmp_path / "argv.py"
    stub.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    stub.chmod(0o755)
    return stub


def _make(tmp_path: Path, target: str, **variables: str) -> list[str]:
    """The argv the Makefile's `target` gives the CLI (the CLI replaced by a stub printing its argv)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make here")
    shutil.copy(KIT_ROOT / "Makefile", tmp_path / "Makefile")
    args = [f"{k}={v}" for k, v in variables.items()]
    proc = subprocess.run([make, "-s", "-o", ".venv/.tbdkit-installed", target, f"TBDKIT={_argv_stub(tmp_path)}",
                           *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("odd", ODD)
def test_makefile_passes_each_path_as_one_argument(tmp_path, odd):
    argv = _make(tmp_path, "bench", DATA=f"/data/{odd}", RESULTS=f"res {odd}", FRAMEWORK="pytorch")
    assert argv[argv.index("--data") + 1] == f"/data/{odd}"
    assert argv[argv.index("--results") + 1] == f"res {odd}"
    assert argv[argv.index("--framework") + 1] == "pytorch"
    argv = _make(tmp_path, "sweep", DATA=odd, BATCH="8,16")
    assert argv[argv.index("--data") + 1] == odd and argv[argv.index("--batch") + 1] == "8,16"
    assert _make(tmp_path, "report", RESULTS=odd, REPORT=odd) == ["report", odd, "--out", odd]
    assert _make(tmp_path, "bundle", RESULTS=odd)[1] == odd
    assert not list(tmp_path.rglob("PWNED"))


def test_data_prepare_suggests_a_command_that_pastes_as_it_is(tmp_path):
    folder = tmp_path / "image net; touch PWNED 'x'"
    for wnid in ("n01440764", "n01443537"):
        (folder / wnid).mkdir(parents=True)
        Image.new("RGB", (40, 30), (90, 20, 200)).save(folder / wnid / f"{wnid}_0.JPEG")
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "data", "prepare", "resnet50", "--from", str(folder)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("run it with")]
    command = re.fullmatch(r"run it with `(.*)`", line)
    assert command is not None, line
    assert shlex.split(command[1]) == ["make", "bench", "MODEL=resnet50", f"DATA={folder}"]


def test_log_txt_records_the_command_as_a_shell_reads_it(tmp_path, monkeypatch):
    run_dir = tmp_path / "run; touch PWNED"
    run_dir.mkdir()
    cmd = [sys.executable, "-c", "import sys", str(run_dir / "spec.json"), "it's $(id)"]
    monkeypatch.setattr(native, "command", lambda spec, run_dir: cmd)
    spec = specs.build(model="resnet50", batch_size=2, device="cpu")
    assert native.run(spec, run_dir, lambda event: None) == 0
    first = (run_dir / "log.txt").read_text().splitlines()[0]
    assert first.startswith("$ ") and shlex.split(first[2:]) == cmd
