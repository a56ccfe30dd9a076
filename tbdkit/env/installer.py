"""Installing an environment from its lock exactly: uv when it is here (faster), pip otherwise.

Exactly means the lock's set, nothing more and nothing less, every file checked against the lock's
hashes: uv's `pip sync --require-hashes`, or pip's `install --require-hashes --no-deps -r` followed by
uninstalling whatever the lock does not name. The kit itself goes in afterwards, editable and without
dependencies (the lock already holds them).

uv does not read pip's configuration, so it is handed pip's index options (`pip config list`, which
includes PIP_* variables): the wheel folders and file indexes a machine keeps (say a local copy of
torch's 3 GB of wheels) are then found by uv first, as pip finds them.

Both write every module's bytecode at install (pip does by default, uv with --compile-bytecode): a
framework's import otherwise compiles its sources in every process wherever the cache cannot be written
(PYTHONDONTWRITEBYTECODE, a read-only image): TensorFlow's import took 19 s without it and 5.6 s with it,
MXNet's 9.0 and 2.2 s, PyTorch's 5.1 and 3.0 s (2 cores), and every agent run and test imports one.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tbdkit.env import locks

INSTALLERS = ("auto", "uv", "pip")
_CONFIG_LINE = re.compile(r"^[^.]*\.(find-links|extra-index-url|index-url)='(.*)'$")


def uv_binary() -> str | None:
    """uv beside this Python (the kit's environment has it from the test extra), else on PATH."""
    return shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")


def choose(installer: str) -> tuple[str, str | None]:
    """("uv", its path) or ("pip", None): `auto` takes uv when it is installed."""
    if installer not in INSTALLERS:
        raise ValueError(f"installer must be one of {INSTALLERS}, not {installer!r}")
    uv = uv_binary() if installer in ("auto", "uv") else None
    if installer == "uv" and uv is None:
        from tbdkit.core.errors import UserError

        raise UserError(
            "uv is not installed here: `pip install uv` into the kit's environment, or pass --installer pip."
        )
    return ("uv", uv) if uv else ("pip", None)


def pip_index_options(config_list: str) -> list[str]:
    """uv options for the indexes pip is configured with (`pip config list` output): find-links and extra
    indexes first, the main index last, so that uv looks where pip looks, in pip's order of preference."""
    found: dict[str, list[str]] = {"find-links": [], "extra-index-url": [], "index-url": []}
    for line in config_list.splitlines():
        m = _CONFIG_LINE.match(line.strip())
        if m:
            for value in m.group(2).split():
                if value not in found[m.group(1)]:
                    found[m.group(1)].append(value)
    opts: list[str] = []
    for value in found["find-links"]:
        opts += ["--find-links", value]
    for value in found["extra-index-url"]:
        opts += ["--extra-index-url", value]
    for value in found["index-url"][:1]:
        opts += ["--index-url", value]
    # A version found in several indexes is taken from the first that has it (the local copy); a
    # version only on the main index is still found there.
    return [*opts, "--index-strategy", "unsafe-best-match"] if opts else opts


def pip_config() -> str:
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def venv_command(installer: str, uv: str | None, env_dir: Path) -> list[str]:
    """The command that makes the virtual environment (uv's takes a tenth of a second: no ensurepip)."""
    if installer == "uv":
        assert uv is not None
        return [uv, "venv", "--quiet", "--allow-existing", "--python", sys.executable, str(env_dir)]
    return [sys.executable, "-m", "venv", str(env_dir)]


def remove_command(installer: str, uv: str | None, python: Path, names: list[str]) -> list[str]:
    if installer == "uv":
        assert uv is not None
        return [uv, "pip", "uninstall", "--python", str(python), *names]
    return [str(python), "-m", "pip", "uninstall", "--disable-pip-version-check", "-y", *names]


def commands(installer: str, uv: str | None, python: Path, lock: Path, kit_root: Path) -> list[list[str]]:
    """The commands that install `lock` exactly into the environment of `python`, then the kit."""
    if installer == "uv":
        assert uv is not None
        index = pip_index_options(pip_config())
        return [
            [uv, "pip", "sync", "--python", str(python), "--require-hashes", "--compile-bytecode", *index, str(lock)],
            [uv, "pip", "install", "--python", str(python), "--no-deps", *index, "-e", str(kit_root)],
        ]
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    return [
        [*pip, "install", "--require-hashes", "--no-deps", "-r", str(lock)],
        [*pip, "install", "--no-deps", "-e", str(kit_root)],
    ]


def beyond_lock(lock_text: str, venv: Path) -> list[str]:
    """Packages installed in `venv` that the lock does not name (pip's and the kit's own excepted)."""
    have = locks.installed(locks.site_packages(venv))
    return [
        str(d["package"])
        for d in locks.differences(locks.pins(lock_text), have)
        if d["locked"] is None and d["package"] not in locks.TOOLING
    ]


def version(installer: str, uv: str | None, python: Path) -> str | None:
    cmd = [uv, "--version"] if installer == "uv" and uv else [str(python), "-m", "pip", "--version"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return " ".join(out[:2]) if out else None


if __name__ == "__main__":
    # The Makefile installs the kit's own environment with uv before the kit's dependencies are there: this
    # module needs only the standard library. `python -m tbdkit.env.installer` prints pip's index options for uv.
    print(" ".join(pip_index_options(pip_config())))
