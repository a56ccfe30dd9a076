"""Framework stacks and their native virtual environments.

Each stack (PyTorch, TensorFlow, MXNet) needs its own Python environment: MXNet 1.9.1 pins
numpy<1.24, which TensorFlow 2.21 cannot use. Natively each stack gets a virtual environment
under `.venvs/<stack>/` holding exactly its lock (locks/<stack>-py311.txt: the kit's dependencies,
that stack's extra and the test extra, hash-checked; tbdkit.env.installer) and the kit (editable);
in a container the image is the environment. A stack counts as installed once its environment
holds the marker file written after a successful install, and current while the lock it was
installed from is the lock in force. A stack can also adopt an interpreter that already holds its
framework (tbdkit.env.adopt): its record says `adopted`, and the kit never reinstalls over it.

The NumPy stack (the kit's machinery check, tbdkit.core.frameworks.MACHINERY) is the kit's own environment:
nothing to install, no lock of its own, always installed and current.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tbdkit.core import atomic
from tbdkit.core.errors import UserError
from tbdkit.core.frameworks import KNOWN_FRAMEWORKS, MACHINERY
from tbdkit.core.paths import KIT_ROOT, venvs_dir
from tbdkit.env import installer, locks

MARKER = locks.MARKER


@dataclass(frozen=True)
class Stack:
    name: str
    title: str
    extra: str  # the pyproject optional-dependency group installed into its environment
    module: str  # the framework's import name, to read its version
    disk_gb: float  # what its environment takes on disk, measured (a fresh install, Python 3.11)
    kit_env: bool = False  # the kit's own environment (the machinery check): nothing to install, no lock


STACKS: dict[str, Stack] = {
    # torch 2.14.1+cu130 with its CUDA libraries: 6.1 GB; TensorFlow 2.21: 2.6 GB; MXNet 1.9.1: 0.8 GB.
    "pytorch": Stack("pytorch", "PyTorch", "pytorch", "torch", 6.1),
    "tensorflow": Stack("tensorflow", "TensorFlow", "tensorflow", "tensorflow", 2.6),
    # Apache MXNet is archived; 1.9.1's wheel is py3-none (ctypes), so it runs on Python 3.11.
    "mxnet": Stack("mxnet", "MXNet", "mxnet", "mxnet", 0.8),
    MACHINERY: Stack(MACHINERY, "NumPy", "", "numpy", 0.0, kit_env=True),
}
KIT_ENV_NOTE = "the kit's own environment (the machinery check, no framework): nothing to install"


def is_kit_env(name: str) -> bool:
    """The stack that is the kit's own environment (tbdkit.core.frameworks.MACHINERY)."""
    return name in STACKS and STACKS[name].kit_env


def _kit_record() -> dict:
    """The NumPy stack's install record: the interpreter running the kit, as it is."""
    import numpy

    return {"stack": MACHINERY, "kit_environment": True, "framework_version": numpy.__version__,
            "python": sys.executable, "note": KIT_ENV_NOTE}  # fmt: skip


def get(name: str) -> Stack:
    if name not in STACKS:
        planned = [f for f in KNOWN_FRAMEWORKS if f not in STACKS]
        raise UserError(
            f"Unknown or not yet supported framework stack '{name}': this kit builds "
            f"{', '.join(STACKS)} (planned: {', '.join(planned)})."
        )
    return STACKS[name]


def venv_path(name: str) -> Path:
    return Path(sys.prefix) if is_kit_env(name) else venvs_dir() / name


def python_of(name: str) -> Path:
    return Path(sys.executable) if is_kit_env(name) else venv_path(name) / "bin" / "python"


def lock_of(stack: Stack) -> locks.LockEnv:
    """The lock a stack's native environment is installed from (locks/<stack>-py311.txt)."""
    return locks.get(stack.name)


def _requirements_digest(stack: Stack) -> str:
    """What the stack's environment installs: its lock's digest, so re-locking this stack (and only
    this one) makes its environment out of date."""
    path = lock_of(stack).file
    if not path.is_file():
        locks.read(lock_of(stack))  # raises the UserError that says how to make it
    return locks.digest(path)


def drift(name: str) -> list[dict[str, str | None]] | None:
    """How an installed stack's packages differ from its lock (empty: none); None when not installed. An
    adopted stack is compared with the lock its record names, over the adopted interpreter's packages too."""
    record = marker(name)
    if record is None:
        return None
    if is_kit_env(name):
        return []  # the kit's own environment: `tbdkit doctor` checks it against the kit's lock
    env = locks.get(record["lock"]) if is_adopted(record) and record.get("lock") in locks.ENVS else lock_of(get(name))
    paths = locks.site_packages(venv_path(name)) + adopted_site_dirs(record)
    return locks.differences(locks.pins(locks.read(env)), locks.installed(paths))


def is_adopted(record: dict | None) -> bool:
    """An install record written by `tbdkit setup STACK --adopt PYTHON` (tbdkit.env.adopt)."""
    return isinstance(record, dict) and bool(record.get("adopted"))


def adopted_site_dirs(record: dict | None) -> list[str]:
    adopted = record.get("adopted") if isinstance(record, dict) else None
    return [str(d) for d in adopted.get("site_dirs", [])] if isinstance(adopted, dict) else []


class DamagedStack(UserError):
    """A stack's environment that cannot be used as it is: its install record is not the JSON object the kit
    wrote, or its `python` is not a file."""


def damaged_fix(name: str) -> str:
    return (
        f"run `tbdkit setup {name} --force` to install it again from its lock, or "
        f"`tbdkit setup {name} --adopt PYTHON --force` to adopt an interpreter again"
    )


def marker(name: str) -> dict | None:
    """The install record of a stack's environment, or None when it is not (fully) installed; a DamagedStack
    (a UserError that says what is wrong and the fix) when the record or the environment's python is damaged."""
    if is_kit_env(name):
        return _kit_record()
    path = venv_path(name) / MARKER
    python = python_of(name)
    if not path.is_file() or not (python.exists() or python.is_symlink()):
        return None
    title = STACKS[name].title if name in STACKS else name
    if not python.is_file():
        what = "a folder" if python.is_dir() else "a dangling link" if not python.exists() else "not a file"
        raise DamagedStack(f"The {title} stack's interpreter {python} is {what}: {damaged_fix(name)}.")
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, OSError) as exc:
        why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "not readable JSON"
        raise DamagedStack(
            f"The {title} stack's install record {path} is damaged ({why}): {damaged_fix(name)}."
        ) from None
    if not isinstance(record, dict):
        raise DamagedStack(
            f"The {title} stack's install record {path} is damaged (a JSON {type(record).__name__}, not an object): "
            f"{damaged_fix(name)}."
        )
    return record


def state(name: str) -> str:
    """`installed`, `not installed` or `damaged`, for tables that list every stack (never raises for damage)."""
    try:
        return "installed" if marker(name) is not None else "not installed"
    except DamagedStack:
        return "damaged"


def is_installed(name: str) -> bool:
    return marker(name) is not None


def is_current(name: str) -> bool:
    """Installed, and from the lock in force now; an adopted stack always counts as current: its packages
    are the adopted interpreter's, which the kit never reinstalls (each run records how they differ)."""
    rec = marker(name)
    if is_adopted(rec) or is_kit_env(name):
        return True
    return rec is not None and rec.get("requirements_digest") == _requirements_digest(get(name))


def require(name: str) -> Path:
    """The Python of an installed stack, or a UserError that says how to install it."""
    get(name)
    if not is_installed(name):
        raise UserError(
            f"The {STACKS[name].title} stack is not installed here: run `tbdkit setup {name}` "
            f"(or `make setup FRAMEWORK={name}`), or pass --setup to install missing stacks."
        )
    return python_of(name)


def setup(name: str, log_path: Path | None = None, force: bool = False, how: str = "auto") -> dict:
    """Create or refresh the stack's virtual environment from its lock, exactly. Idempotent: a current
    install is kept. `how`: the installer, "auto" (uv when installed, else pip), "uv" or "pip"."""
    stack = get(name)
    if stack.kit_env:
        return _kit_record()
    try:
        old = marker(name)
    except DamagedStack:
        if not force:
            raise
        old = {"adopted": "damaged"}  # whatever it was, made again from nothing
    if not force and is_current(name):
        return old or {}
    lock = lock_of(stack)
    lock_text = locks.read(lock)
    tool, uv = installer.choose(how)
    env_dir = venv_path(name)
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    log_path = log_path or env_dir.parent / f"{name}.setup.log"
    if is_adopted(old) and env_dir.is_dir() and not env_dir.is_symlink():  # an overlay's .pth must not survive
        shutil.rmtree(env_dir)
    _check_disk(stack, env_dir)
    (env_dir / MARKER).unlink(missing_ok=True)
    with log_path.open("w") as log:
        steps = [
            installer.venv_command(tool, uv, env_dir),
            *installer.commands(tool, uv, python_of(name), lock.file, KIT_ROOT),
        ]
        for cmd in steps:
            # pip gets a second try: a file index or a registry can fail once and then answer.
            for attempt in (1, 2) if "pip" in cmd else (1,):
                log.write("$ " + " ".join(cmd) + "\n")
                log.flush()
                start = time.monotonic()
                proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=_clean_env())
                log.write(f"# {time.monotonic() - start:.1f} s\n")
                if proc.returncode == 0:
                    break
                log.write(f"# exit {proc.returncode} (attempt {attempt})\n")
                log.flush()
            if proc.returncode != 0:
                raise UserError(
                    f"Installing the {stack.title} stack failed (exit {proc.returncode}); "
                    f"its log is {log_path}: fix what it reports, then run `tbdkit setup {name}` again. "
                    f"Its last lines:\n{log_tail(log_path)}"
                )
        extra = installer.beyond_lock(lock_text, env_dir)
        if extra:  # pip installs what it is told and removes nothing: the rest of a sync
            cmd = installer.remove_command(tool, uv, python_of(name), extra)
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=_clean_env())
    version = subprocess.run(
        [str(python_of(name)), "-c", f"import {stack.module}; print({stack.module}.__version__)"],
        capture_output=True,
        text=True,
        env=_clean_env(),
    )
    record = {
        "stack": name,
        "framework_version": version.stdout.strip() or None,
        "python": str(python_of(name)),
        "kit_root": str(KIT_ROOT),
        "requirements_digest": _requirements_digest(stack),
        "lock": lock.name,
        "lock_file": f"locks/{lock.file.name}",
        "lock_digest": locks.digest(lock.file),
        "installer": installer.version(tool, uv, python_of(name)),
        "differences": locks.differences(locks.pins(lock_text), locks.installed(locks.site_packages(env_dir))),
    }
    atomic.write_text(env_dir / MARKER, json.dumps(record, indent=2))
    return record


def _check_disk(stack: Stack, env_dir: Path) -> None:
    """Refuse to start an install that cannot fit: a full disk half-way through pip is a worse error."""
    present = sum(f.stat().st_size for f in env_dir.rglob("*") if f.is_file()) if env_dir.exists() else 0
    need = stack.disk_gb * 1e9 * 1.1 - present  # a tenth more for pip's temporary files
    free = shutil.disk_usage(env_dir.parent).free
    if free < need:
        raise UserError(
            f"The {stack.title} stack needs about {need / 1e9:.1f} GB free in {env_dir.parent}, which has "
            f"{free / 1e9:.1f} GB: free some space, or set TBDKIT_VENVS to a folder on a larger disk."
        )


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a setup log, where pip says why it stopped."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(the log could not be read)"
    return "\n".join("  " + line for line in text[-lines:])


def _clean_env() -> dict[str, str]:
    """The environment minus the calling venv's, so the stack's own interpreter is used."""
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONHOME", None)
    return env


def agent_env() -> dict[str, str]:
    env = _clean_env()
    # The kit that launches the agent is the kit the agent runs: its source tree comes first, so a
    # stack environment made from another checkout (TBDKIT_VENVS) still runs this checkout's code.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(KIT_ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up INFO/WARNING lines, not errors
    env["TBDKIT_LAUNCHER_PID"] = str(
        os.getpid()
    )  # the run's process tree grows from here (agent/collectors/neighbours.py)
    return env
