"""Adopting an interpreter that already holds a framework: `tbdkit setup STACK --adopt PYTHON [--wheels DIR]`.

Rented GPU machines often put the user in a container whose Python already has PyTorch (or TensorFlow,
or MXNet) built for that machine's driver, without Docker; Lambda Stack, the clouds' deep-learning images
and NGC's containers run natively the same way. Adopting such an interpreter makes the stack's
environment (`.venvs/<stack>`, or TBDKIT_VENVS) a thin overlay of it: a virtual environment on the
interpreter's base Python, without pip, with one `.pth` file that puts this kit's source tree and every
site folder of the adopted interpreter on its path. The framework is used as it is, never reinstalled.
(`--system-site-packages` would not do: when the adopted interpreter is itself a virtual environment,
that flag shows the *base* interpreter's packages, not the adopted ones.)

What the kit needs and the interpreter lacks (its dependencies, the stack's workload libraries) is
installed into the overlay from `--wheels DIR` only, with `pip --no-index --find-links DIR`, every package
the interpreter has pinned at its own version (a pip constraint), so nothing it has is replaced. The
install record says `adopted`: which interpreter, its site folders, the framework build, what came from
the wheels and what is still missing and why. Every run's env.json records where the packages differ
from the lock (tbdkit.env.locks.this_environment), as runs in an image do; `tbdkit setup` and
`--setup` never reinstall over it (stacks.is_current), and `tbdkit doctor` shows it as adopted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tbdkit.core import atomic
from tbdkit.core.errors import UserError
from tbdkit.core.paths import KIT_ROOT
from tbdkit.env import locks, stacks

# `python -m tbdkit.env.adopt STACK --wheels DIR` (main, below) needs only the standard library: on a machine
# without a network whose Python lacks the kit's CLI libraries, that Python adopts itself, and the overlay then
# runs the kit (`.venvs/STACK/bin/python -m tbdkit.cli ...`).

PTH = "tbdkit-adopted.pth"  # the overlay's one addition: the kit's tree, then the interpreter's site folders
OLDEST = (3, 10)  # the kit runs on Python 3.10 and newer (pyproject.toml's requires-python)
# The framework's own distributions, never installed by adoption: the interpreter's build is the point.
FRAMEWORK_DISTS = {"pytorch": {"torch"}, "tensorflow": {"tensorflow"}, "mxnet": {"mxnet"}}
PROBE_TIMEOUT_S = 120
PIP_TIMEOUT_S = 900

# What the adopted interpreter is: run by it, with the kit's and the caller's paths kept away.
_PROBE = r"""
import importlib.util, json, site, sys
dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
try:
    dirs.append(site.getusersitepackages())
except Exception:
    pass
dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
print(json.dumps({
    "python": sys.executable,
    "version": "%d.%d.%d" % sys.version_info[:3],
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "site_dirs": [d for d in dict.fromkeys(dirs) if d in sys.path],
    "has_framework": importlib.util.find_spec(sys.argv[1]) is not None,
    "has_pip": importlib.util.find_spec("pip") is not None,
}))
"""

# Run by the overlay once it is made: the framework, the kit and the framework's build, or why not.
_CHECK = r"""
import importlib, json, sys
importlib.import_module(sys.argv[1])
import tbdkit.spec, tbdkit.results.summary
from tbdkit.env.machine import framework_build
print(json.dumps({"build": framework_build(), "paths": sys.path}))
"""


def _clean_env() -> dict[str, str]:
    """The environment for the adopted interpreter: none of the caller's venv, home or Python path."""
    env = dict(os.environ)
    for key in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP"):
        env.pop(key, None)
    return env


def probe(python: str, module: str) -> dict[str, Any]:
    """What the interpreter at `python` is: its executable, version, site folders, whether it has `module`."""
    exe = shutil.which(python) if os.sep not in python else python
    if exe is None or not Path(exe).exists():
        raise UserError(f"No Python at '{python}': pass --adopt the path of the interpreter that holds the framework.")
    why = "no output"
    try:
        proc = subprocess.run(
            [exe, "-c", _PROBE, module],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=_clean_env(),
            stdin=subprocess.DEVNULL,
        )
        why = (proc.stderr.strip().splitlines() or [why])[-1]
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = str(exc)
    except (ValueError, IndexError):
        pass
    raise UserError(f"'{exe}' did not run as a Python interpreter ({why}): pass --adopt a python3 executable.")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split(".")[:2])


_MARKER = re.compile(r"""^\s*python_version\s*(<=|>=|==|!=|<|>)\s*['"](\d+(?:\.\d+)*)['"]\s*$""")


def applies(requirement: str, python: str) -> bool:
    """Whether a requirement's environment marker holds for a Python version ('3.12.1'). Only the
    `python_version` markers pyproject.toml uses are read; any other marker is left for pip to judge."""
    if ";" not in requirement:
        return True
    marker = requirement.split(";", 1)[1]
    m = _MARKER.match(marker)
    if m is None:
        return True
    have, want = _version_tuple(python), _version_tuple(m.group(2))
    return {
        "<": have < want,
        "<=": have <= want,
        ">": have > want,
        ">=": have >= want,
        "==": have == want,
        "!=": have != want,
    }[m.group(1)]


def requirement_name(requirement: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return locks.normalize(m.group(1)) if m else requirement


def wanted(stack: stacks.Stack, python: str) -> list[str]:
    """What the kit needs in this stack beside the framework: its dependencies and the stack's extra, as
    pyproject.toml states them, for this Python; the framework's own distributions left out."""
    project = locks.pyproject()
    reqs = [*project.get("dependencies", []), *project.get("optional-dependencies", {}).get(stack.extra, [])]
    skip = FRAMEWORK_DISTS.get(stack.name, set())
    out = [r for r in reqs if applies(r, python) and requirement_name(r) not in skip]
    return list(dict.fromkeys(out))


def wheel_names(folder: Path) -> set[str]:
    """The projects a folder of wheels (and source archives) offers, by normalized name."""
    names = set()
    for f in folder.iterdir():
        if f.name.endswith(".whl") or f.name.endswith((".tar.gz", ".zip")):
            names.add(locks.normalize(re.split(r"-\d", f.name, maxsplit=1)[0]))
    return names


_PINNABLE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")


def constraints(have: dict[str, str]) -> str:
    """A pip constraints file holding every installed distribution at its version: pip may add packages
    beside them, never replace one."""
    return "".join(f"{name}=={version}\n" for name, version in sorted(have.items()) if _PINNABLE.match(version))


def _pip(overlay_python: Path, has_pip: bool) -> list[str]:
    """pip for the overlay: the adopted interpreter's own (seen through the .pth), else this Python's pip
    aimed at the overlay (pip's --python)."""
    if has_pip:
        return [str(overlay_python), "-m", "pip", "--disable-pip-version-check"]
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(overlay_python)]


def _pip_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return ((errors or lines or ["pip failed"])[-1])[:300]


def install_from_wheels(
    pip: list[str], folder: Path, reqs: list[str], have: dict[str, str], work: Path, log: Any
) -> tuple[list[str], list[dict[str, str]]]:
    """Install `reqs` from the wheels in `folder` only (no index: no network), `have` pinned. All at once;
    if pip refuses that, one by one, so that one missing wheel or conflict costs only its own package.
    (installed requirements, [{requirement, why}] of those that were not)."""
    cons = work / "adopt-constraints.txt"
    cons.write_text(constraints(have))
    # --no-compile: the modules the kit imports compile when first imported; the rest never need to
    base = [*pip, "install", "--no-index", "--no-compile", "--find-links", str(folder), "-c", str(cons)]

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        log.write("$ " + " ".join([*base, *args]) + "\n")
        log.flush()
        start = time.monotonic()
        proc = subprocess.run([*base, *args], capture_output=True, text=True, env=_clean_env(), timeout=PIP_TIMEOUT_S)
        log.write(proc.stdout + proc.stderr + f"# exit {proc.returncode} in {time.monotonic() - start:.1f} s\n")
        log.flush()
        return proc

    if not reqs or run(reqs).returncode == 0:
        return reqs, []
    done, failed = [], []
    for req in reqs:
        proc = run([req])
        if proc.returncode == 0:
            done.append(req)
        else:
            failed.append({"requirement": req, "why": _pip_error(proc.stdout + proc.stderr)})
    return done, failed


def _remove(env_dir: Path) -> None:
    if env_dir.is_symlink() or env_dir.is_file():
        env_dir.unlink()
    elif env_dir.exists():
        shutil.rmtree(env_dir)


def lock_for(stack: stacks.Stack) -> locks.LockEnv:
    """The lock an adopted environment is compared with: the stack's image lock, the kit's dependencies and the
    stack's extra over someone else's framework build, which is what an adopted interpreter is (the native lock
    adds the test tools). Where its Python differs, env.json's lock entry says so."""
    return locks.get(f"{stack.name}-image")


def adopt(name: str, python: str, wheels: Path | None = None, force: bool = False) -> dict[str, Any]:
    """Make the stack's environment an overlay of the interpreter `python`, install what the kit lacks
    from `wheels`, check that the framework and the kit import there, and write the install record."""
    stack = stacks.get(name)
    if wheels is not None and not wheels.is_dir():
        raise UserError(f"--wheels {wheels} is not a folder: pass the folder that holds the wheels to install.")
    found = probe(python, stack.module)
    version = str(found["version"])
    if _version_tuple(version) < OLDEST:
        raise UserError(
            f"{found['python']} is Python {version}; the kit needs Python 3.10 or newer: adopt a newer interpreter."
        )
    if not found["has_framework"]:
        raise UserError(
            f"{found['python']} (Python {version}) has no {stack.module}: pass --adopt the Python that holds "
            f"{stack.title}, or run `tbdkit setup {name}` for the kit's own {stack.title} stack."
        )
    env_dir = stacks.venv_path(name)
    old = stacks.marker(name)
    if old is not None and not old.get("adopted") and not force:
        raise UserError(
            f"The {stack.title} stack in {env_dir} was installed from the kit's lock: pass --force to replace it "
            f"with the adopted interpreter, or set TBDKIT_VENVS to another folder."
        )
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    log_path = env_dir.parent / f"{name}.setup.log"
    _remove(env_dir)
    with log_path.open("w") as log:
        log.write(f"# adopting {found['python']} (Python {version}) as the {stack.title} stack\n")
        cmd = [str(found["python"]), "-m", "venv", "--without-pip", str(env_dir)]
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=_clean_env())
        if proc.returncode != 0:
            raise UserError(
                f"Making the overlay environment {env_dir} failed (exit {proc.returncode}); its log is {log_path}:"
                f"\n{stacks.log_tail(log_path)}"
            )
        overlay = stacks.python_of(name)
        purelib = subprocess.run(
            [str(overlay), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            env=_clean_env(),
            check=True,
        ).stdout.strip()
        site_dirs = [str(d) for d in found["site_dirs"]]
        lines = [str(KIT_ROOT), *(f"import site; site.addsitedir({d!r})" for d in site_dirs)]
        Path(purelib, PTH).write_text("\n".join(lines) + "\n")
        reqs = wanted(stack, version)
        have = locks.installed([purelib, *site_dirs])
        missing = [r for r in reqs if requirement_name(r) not in have]
        offered = wheel_names(wheels) if wheels is not None else set()
        to_install = [r for r in missing if requirement_name(r) in offered]
        installed, failed = (
            install_from_wheels(_pip(overlay, bool(found["has_pip"])), wheels, to_install, have, env_dir, log)
            if wheels is not None and to_install
            else ([], [])
        )
        where = f"no wheel of it in {wheels}" if wheels is not None else "not in the interpreter, and no --wheels given"
        failed += [{"requirement": r, "why": where} for r in missing if r not in to_install]
        check = subprocess.run(
            [str(overlay), "-c", _CHECK, stack.module],
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=PIP_TIMEOUT_S,
        )
        log.write(f"$ {overlay} -c <import {stack.module}, the kit, its build>\n{check.stdout}{check.stderr}")
    if check.returncode != 0:
        why = (check.stderr.strip().splitlines() or ["no output"])[-1]
        lacking = ", ".join(f["requirement"] for f in failed) or "none"
        raise UserError(
            f"The adopted {stack.title} stack does not run the kit ({why}). Still missing: {lacking}. "
            f"Pass --wheels DIR with wheels of them (`pip download -d DIR ...` on a machine with a network), "
            f"then run this again; the log is {log_path}."
        )
    build = json.loads(check.stdout.strip().splitlines()[-1])["build"]
    lock = lock_for(stack)
    record = {
        "stack": name,
        "adopted": {
            "python": found["python"],
            "python_version": version,
            "prefix": found["prefix"],
            "site_dirs": site_dirs,
        },
        "framework_version": (build or {}).get("version"),
        "framework_build": build,
        "python": str(overlay),
        "kit_root": str(KIT_ROOT),
        "requirements_digest": stacks._requirements_digest(stack),
        "lock": lock.name,
        "lock_file": f"locks/{lock.file.name}",
        "lock_digest": locks.digest(lock.file) if lock.file.is_file() else None,
        "installer": "adopted",
        "wheels": str(wheels.resolve()) if wheels is not None else None,
        "from_wheels": installed,
        "missing": failed,
        "differences": locks.differences(
            locks.pins(lock.file.read_text()) if lock.file.is_file() else {},
            locks.installed([purelib, *site_dirs]),
        ),
    }
    atomic.write_text(env_dir / stacks.MARKER, json.dumps(record, indent=2))
    return record


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m tbdkit.env.adopt",
        description="`tbdkit setup STACK --adopt PYTHON` with the standard library only: the stack's environment "
        "over PYTHON (default: this one), what the kit lacks from --wheels DIR.",
    )
    parser.add_argument("stack", choices=sorted(stacks.STACKS))
    parser.add_argument("--python", default=sys.executable, help="the interpreter to adopt (default: this one)")
    parser.add_argument("--wheels", type=Path, help="a folder of wheels of what the kit lacks (no network)")
    parser.add_argument("--force", action="store_true", help="replace a stack installed from the kit's lock")
    args = parser.parse_args(argv)
    try:
        record = adopt(args.stack, args.python, args.wheels, args.force)
    except UserError as exc:
        print(f"tbdkit setup --adopt: {exc}", file=sys.stderr)
        return 2
    print(
        f"{stacks.get(args.stack).title} stack: adopted {record['framework_version']} of {record['adopted']['python']} "
        f"in {stacks.venv_path(args.stack)}; run the kit with {record['python']} -m tbdkit.cli"
    )
    for m in record["missing"]:
        print(f"  not installed: {m['requirement']} ({m['why']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
