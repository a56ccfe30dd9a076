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
the interpreter has pinned at its own version (a pip constraint), so nothing it has is replaced; where uv is
installed, pip only resolves (it sees the interpreter's packages) and uv unpacks the wheels pip chose. The
install record says `adopted`: which interpreter, its site folders, the framework build, what came from
the wheels and what is still missing and why. Every run's env.json records where the packages differ
from the lock (tbdkit.env.locks.this_environment), as runs in an image do; `tbdkit setup` and
`--setup` never reinstall over it (stacks.is_current), and `tbdkit doctor` shows it as adopted.
"""

from __future__ import annotations

import errno
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from tbdkit.core import atomic
from tbdkit.core.errors import UserError
from tbdkit.core.paths import KIT_ROOT
from tbdkit.env import installer, locks, stacks

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

# Run by the overlay once it is made: the kit, the framework and the framework's build, or why not. The kit
# first: where its dependencies are missing, the check fails before it pays for the framework's import.
_CHECK = r"""
import importlib, json, sys
import tbdkit.spec, tbdkit.results.summary
importlib.import_module(sys.argv[1])
from tbdkit.env.machine import framework_build
print(json.dumps({"build": framework_build(), "paths": sys.path}))
"""


def _clean_env() -> dict[str, str]:
    """The environment for the adopted interpreter: none of the caller's venv, home or Python path."""
    env = dict(os.environ)
    for key in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP"):
        env.pop(key, None)
    return env


STDERR_SHOWN = 400  # characters of an interpreter's stderr quoted in a sentence (its tail: where Python says why)
STDOUT_READ = 1 << 20  # the probe's answer is a few hundred bytes; more than a MiB is not an answer
_ANSWER = {"python": str, "version": str, "prefix": str, "base_prefix": str, "site_dirs": list,
           "has_framework": bool, "has_pip": bool}  # fmt: skip
_VERSION = re.compile(r"^(\d+)\.(\d+)(\.\d+)?$")


def _tail(path: Path, limit: int) -> str:
    """The last `limit` characters of a file, read without reading the rest (an interpreter may write MBs)."""
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - limit * 4))
        text = f.read().decode("utf-8", "replace")
    text = " ".join(text.split())[-limit:]
    return ("..." + text) if size > limit else text


def _read_head(path: Path, limit: int) -> str:
    with path.open("rb") as f:
        return f.read(limit).decode("utf-8", "replace")


def answer(stdout: str) -> dict[str, Any] | str:
    """The probe's answer on its last line, checked field by field; or what is wrong with it."""
    lines = stdout.strip().splitlines()
    if not lines:
        return "it printed nothing"
    try:
        found = json.loads(lines[-1])
    except ValueError:
        return f"its answer is not JSON ({lines[-1][:80]!r})"
    if not isinstance(found, dict):
        return f"its answer is a JSON {type(found).__name__}, not an object"
    for key, kind in _ANSWER.items():
        if not isinstance(found.get(key), kind):
            return f"its answer's {key!r} is {found.get(key)!r:.60}, not a {kind.__name__}"
    if _VERSION.match(found["version"]) is None:
        return f"its answer's version is {found['version']!r:.40}, not a Python version like 3.12.1"
    if not all(isinstance(d, str) for d in found["site_dirs"]):
        return "its answer's site_dirs are not all paths"
    return found


def probe(python: str, module: str) -> dict[str, Any]:
    """What the interpreter at `python` is: its executable, version, site folders, whether it has `module`;
    a UserError of one sentence (its stderr's tail quoted, bounded) when it does not answer as Python does."""
    exe = shutil.which(python) if os.sep not in python else python
    if exe is None or not Path(exe).exists():
        raise UserError(f"No Python at '{python}': pass --adopt the path of the interpreter that holds the framework.")
    if Path(exe).is_dir():
        raise UserError(f"'{exe}' is a folder: pass --adopt the path of a python3 executable.")
    fix = "pass --adopt a python3 executable"
    with tempfile.TemporaryDirectory(prefix="tbdkit-probe-") as tmp:
        out_path, err_path = Path(tmp, "out"), Path(tmp, "err")
        try:
            with out_path.open("wb") as out, err_path.open("wb") as err:
                proc = subprocess.run([exe, "-c", _PROBE, module], stdout=out, stderr=err, timeout=PROBE_TIMEOUT_S,
                                      env=_clean_env(), stdin=subprocess.DEVNULL)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise UserError(f"'{exe}' did not answer within {PROBE_TIMEOUT_S} s: {fix}.") from None
        except OSError as exc:
            raise UserError(f"'{exe}' could not be run ({exc.strerror or exc}): {fix}.") from None
        stderr = _tail(err_path, STDERR_SHOWN)
        said = f"; its stderr ends: {stderr}" if stderr else ""
        if proc.returncode != 0:
            raise UserError(f"'{exe}' did not run as a Python interpreter (exit {proc.returncode}{said}): {fix}.")
        found = answer(_read_head(out_path, STDOUT_READ))
    if isinstance(found, str):
        raise UserError(f"'{exe}' did not answer as a Python interpreter does ({found}{said}): {fix}.")
    return {**found, "invoked": os.path.abspath(exe)}  # what was run: a wrapper script's path, not its target's


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
_REQUIRES = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def framework_closure(site_dirs: list[str], roots: set[str]) -> tuple[dict[str, str], set[str]]:
    """What the framework needs, as the interpreter holds it: {name: version} of the framework's distributions
    and everything they require (not their extras), transitively, from the site folders' metadata; and which of
    those are pure Python (their WHEEL says Root-Is-Purelib: a newer one in the overlay cannot break a build)."""
    dists: dict[str, importlib.metadata.Distribution] = {}
    for d in importlib.metadata.distributions(path=list(site_dirs)):
        name = d.metadata["Name"]
        if name:
            dists.setdefault(locks.normalize(name), d)
    pinned: dict[str, str] = {}
    pure: set[str] = set()
    todo = [locks.normalize(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in pinned or name not in dists:
            continue
        dist = dists[name]
        pinned[name] = dist.version
        if "root-is-purelib: true" in (dist.read_text("WHEEL") or "").lower():
            pure.add(name)
        for req in dist.requires or []:
            m = _REQUIRES.match(req)
            if m and "extra" not in req.partition(";")[2]:
                todo.append(locks.normalize(m.group(1)))
    return pinned, pure


def constraints(pinned: dict[str, str], pure: set[str] | frozenset[str] = frozenset()) -> str:
    """A pip constraints file holding the framework and what it needs: a compiled package at its own version
    (its build is the framework's), a pure-Python one at its version or newer (the kit's packages may need a
    newer typing_extensions than the framework's interpreter has; the newer one goes into the overlay only)."""
    return "".join(
        f"{name}{'>=' if name in pure else '=='}{version}\n"
        for name, version in sorted(pinned.items())
        if _PINNABLE.match(version)
    )


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


# Packages the kit measures with, whose own declared dependencies it never imports (zeus declares tyro, its
# CLI's, and amdsmi, AMD's GPUs'): installed without those when their wheels are missing, if the module the
# collector imports then imports.
MEASUREMENT = {"zeus": "zeus.monitor"}


def install_from_wheels(
    pip: list[str], overlay: Path, folder: Path, reqs: list[str], cons: str, work: Path, log: Any
) -> tuple[list[str], list[dict[str, str]], list[str]]:
    """Install `reqs` from the wheels in `folder` only (no index: no network) under the constraints `cons`.
    All at once; if pip refuses that, one by one, so that one missing wheel or conflict costs only its own
    package; a measurement package pip refuses goes in without its dependencies when its module then imports.
    (installed requirements, [{requirement, why}] of those that were not, notes on what was installed how)."""
    cons_path = work / "adopt-constraints.txt"
    cons_path.write_text(cons)
    # --no-compile: the modules the kit imports compile when first imported; the rest never need to
    base = [*pip, "install", "--no-index", "--no-compile", "--find-links", str(folder), "-c", str(cons_path)]

    def run(args: list[str], cmd: list[str] | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [*(cmd or base), *args]
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), timeout=PIP_TIMEOUT_S)
        log.write(
            proc.stdout[-20000:]
            + proc.stderr[-20000:]
            + f"# exit {proc.returncode} in {time.monotonic() - start:.1f} s\n"
        )
        log.flush()
        return proc

    if not reqs or _with_uv(run, overlay, reqs, work) or run(reqs).returncode == 0:
        return reqs, [], []
    done, failed, notes = [], [], []
    for req in reqs:
        proc = run([req])
        if proc.returncode == 0:
            done.append(req)
            continue
        module = MEASUREMENT.get(requirement_name(req))
        if module is not None and run(["--no-deps", req]).returncode == 0:
            check = run([], [str(overlay), "-c", f"import {module}"])
            if check.returncode == 0:
                done.append(req)
                notes.append(
                    f"{req}: installed without its declared dependencies ({_pip_error(proc.stdout + proc.stderr)}); "
                    f"{module} imports, which is all the kit uses of it"
                )
                continue
        failed.append({"requirement": req, "why": _pip_error(proc.stdout + proc.stderr)})
    return done, failed, notes


def _with_uv(run: Any, overlay: Path, reqs: list[str], work: Path) -> bool:
    """Install `reqs` as pip resolves them (a dry run that sees the adopted interpreter's packages through the
    .pth, which uv does not) but unpacked by uv, which links each wheel's files from its cache where pip copies
    them: whether it did. Without uv, or where pip cannot report (pip < 22.2) or resolve, the caller installs
    with pip."""
    uv = installer.uv_binary()
    report = work / "adopt-report.json"
    if uv is None or run(["--dry-run", "--report", str(report), *reqs]).returncode != 0:
        return False
    try:
        urls = [item["download_info"]["url"] for item in json.loads(report.read_text())["install"]]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    files = [unquote(urlparse(u).path) for u in urls if isinstance(u, str) and u.startswith("file:")]
    if len(files) != len(urls) or not all(f.endswith(".whl") for f in files):
        return False  # a source archive to build: pip builds it
    unpack = [uv, "pip", "install", "--python", str(overlay), "--no-deps", "--no-index"]
    return not files or run(files, unpack).returncode == 0


def _remove(env_dir: Path) -> None:
    if env_dir.is_symlink() or env_dir.is_file():
        env_dir.unlink()
    elif env_dir.exists():
        shutil.rmtree(env_dir, ignore_errors=True)


def swap(new: Path, env_dir: Path) -> None:
    """Put the checked environment `new` at `env_dir`: the old one moved aside, the new one renamed in, the old
    one removed; if the rename in fails, the old one goes back where it was."""
    aside = env_dir.with_name(f".{env_dir.name}.replaced-{os.getpid()}")
    had_old = env_dir.exists() or env_dir.is_symlink()
    if had_old:
        os.replace(env_dir, aside)
    try:
        os.replace(new, env_dir)
    except OSError:
        if had_old:
            os.replace(aside, env_dir)
        raise
    if had_old:
        _remove(aside)


def _full_disk(exc: OSError, where: Path) -> UserError | None:
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return UserError(
            f"The disk under {where} filled while adopting ({exc.strerror}); the stack there is as it was: free some "
            "space, or set TBDKIT_VENVS to a folder on a larger disk, then adopt again."
        )
    return None


def lock_for(stack: stacks.Stack) -> locks.LockEnv:
    """The lock an adopted environment is compared with: the stack's image lock, the kit's dependencies and the
    stack's extra over someone else's framework build, which is what an adopted interpreter is (the native lock
    adds the test tools). Where its Python differs, env.json's lock entry says so."""
    return locks.get(f"{stack.name}-image")


def adopt(name: str, python: str, wheels: Path | None = None, force: bool = False) -> dict[str, Any]:
    """Make the stack's environment an overlay of the interpreter `python`, install what the kit lacks
    from `wheels`, check that the framework and the kit import there, and write the install record. The
    overlay is built beside the stack's environment and swapped in only once its check passed: a failed
    adoption leaves the stack as it was."""
    stack = stacks.get(name)
    if wheels is not None and not wheels.is_dir():
        raise UserError(f"--wheels {wheels} is not a folder: pass the folder that holds the wheels to install.")
    env_dir = stacks.venv_path(name)
    try:
        old = stacks.marker(name)
    except stacks.DamagedStack:
        if not force:
            raise
        old = None
    if old is not None and not old.get("adopted") and not force:
        raise UserError(
            f"The {stack.title} stack in {env_dir} was installed from the kit's lock: pass --force to replace it "
            f"with the adopted interpreter, or set TBDKIT_VENVS to another folder."
        )
    found = probe(python, stack.module)
    if _inside(found["prefix"], env_dir):  # the stack's own overlay: adopt what it overlays
        original = (old or {}).get("adopted")
        if not isinstance(original, dict) or not isinstance(original.get("python"), str):
            raise UserError(
                f"{python} is the {stack.title} stack's own environment, not an interpreter of its own: pass --adopt "
                "the Python that holds the framework."
            )
        found = probe(str(original.get("invoked") or original["python"]), stack.module)
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
    try:
        env_dir.parent.mkdir(parents=True, exist_ok=True)
        new = Path(tempfile.mkdtemp(prefix=f".{name}.adopting-", dir=env_dir.parent))
        new.chmod(0o755)  # as a folder `python -m venv` makes
    except OSError as exc:
        raise _full_disk(exc, env_dir.parent) or UserError(
            f"The stacks' folder {env_dir.parent} cannot be written ({exc.strerror or exc}): set TBDKIT_VENVS to a "
            "writable folder."
        ) from None
    try:
        record = _build(stack, found, new, env_dir, wheels)
        swap(new, env_dir)
    except OSError as exc:
        raise _full_disk(exc, env_dir.parent) or exc from None
    finally:
        _remove(new)
    return record


def _inside(path: str, folder: Path) -> bool:
    p, f = Path(path).resolve(), folder.resolve()
    return p == f or f in p.parents


def _build(stack: stacks.Stack, found: dict[str, Any], new: Path, env_dir: Path, wheels: Path | None) -> dict[str, Any]:
    """The overlay in the folder `new`, checked, its record written there (naming `env_dir`, where it goes)."""
    name, version = stack.name, str(found["version"])
    log_path = env_dir.parent / f"{name}.setup.log"
    with log_path.open("w") as log:
        log.write(f"# adopting {found['python']} (Python {version}) as the {stack.title} stack\n")
        cmd = [str(found["python"]), "-m", "venv", "--without-pip", "--clear", str(new)]
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=_clean_env())
        if proc.returncode != 0:
            raise UserError(
                f"Making the overlay environment for {env_dir} failed (exit {proc.returncode}); its log is "
                f"{log_path}; the stack there is as it was:\n{stacks.log_tail(log_path)}"
            )
        overlay = new / "bin" / "python"
        purelib = subprocess.run(
            [str(overlay), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            env=_clean_env(),
            check=True,
        ).stdout.strip()
        site_dirs = [str(d) for d in found["site_dirs"] if not _inside(str(d), env_dir)]
        lines = [str(KIT_ROOT), *(f"import site; site.addsitedir({d!r})" for d in site_dirs)]
        Path(purelib, PTH).write_text("\n".join(lines) + "\n")
        reqs = wanted(stack, version)
        have = locks.installed([purelib, *site_dirs])
        missing = [r for r in reqs if requirement_name(r) not in have]
        offered = wheel_names(wheels) if wheels is not None else set()
        to_install = [r for r in missing if requirement_name(r) in offered]
        pinned, pure = framework_closure(site_dirs, FRAMEWORK_DISTS.get(name, set()))
        installed: list[str] = []
        failed: list[dict[str, str]] = []
        notes: list[str] = []
        if wheels is not None and to_install:
            pip = _pip(overlay, bool(found["has_pip"]))
            cons = constraints(pinned, pure)
            installed, failed, notes = install_from_wheels(pip, overlay, wheels, to_install, cons, new, log)
        where = f"no wheel of it in {wheels}" if wheels is not None else "not in the interpreter, and no --wheels given"
        failed += [{"requirement": r, "why": where} for r in missing if r not in to_install]
        check = subprocess.run(
            [str(overlay), "-c", _CHECK, stack.module],
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=PIP_TIMEOUT_S,
        )
        log.write(f"$ {overlay} -c <import the kit, {stack.module}, its build>\n")
        log.write(check.stdout[-20000:] + check.stderr[-20000:])
    build = check_answer(check)
    if isinstance(build, str):
        lacking = ", ".join(f["requirement"] for f in failed) or "none"
        raise UserError(
            f"The adopted {stack.title} stack does not run the kit ({build}); the stack in {env_dir} is as it was. "
            f"Still missing: {lacking}. Pass --wheels DIR with wheels of them (`pip download -d DIR ...` on a "
            f"machine with a network), then run this again; the log is {log_path}."
        )
    lock = lock_for(stack)
    record = {
        "stack": name,
        "adopted": {
            "python": found["python"],
            "invoked": found["invoked"],
            "python_version": version,
            "prefix": found["prefix"],
            "site_dirs": site_dirs,
        },
        "framework_version": (build or {}).get("version"),
        "framework_build": build,
        "python": str(env_dir / "bin" / "python"),
        "kit_root": str(KIT_ROOT),
        "requirements_digest": stacks._requirements_digest(stack),
        "lock": lock.name,
        "lock_file": f"locks/{lock.file.name}",
        "lock_digest": locks.digest(lock.file) if lock.file.is_file() else None,
        "installer": "adopted",
        "wheels": str(wheels.resolve()) if wheels is not None else None,
        "from_wheels": installed,
        "pinned": constraints(pinned, pure).split(),
        "notes": notes,
        "missing": failed,
        "differences": locks.differences(
            locks.pins(lock.file.read_text()) if lock.file.is_file() else {},
            locks.installed([purelib, *site_dirs]),
        ),
    }
    atomic.write_text(new / stacks.MARKER, json.dumps(record, indent=2))
    return record


def check_answer(check: subprocess.CompletedProcess[str]) -> dict[str, Any] | None | str:
    """The framework build the overlay's check printed, or why the check failed (one line, bounded)."""
    if check.returncode != 0:
        return " ".join((check.stderr.strip().splitlines() or ["no output"])[-1].split())[:STDERR_SHOWN]
    try:
        build = json.loads(check.stdout.strip().splitlines()[-1])["build"]
    except (ValueError, IndexError, KeyError, TypeError):
        return "its check printed no answer"
    return build if isinstance(build, dict) or build is None else "its check printed no framework build"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m tbdkit.env.adopt",
        description="`tbdkit setup STACK --adopt PYTHON` with the standard library only: the stack's environment "
        "over PYTHON (default: this one), what the kit lacks from --wheels DIR.",
    )
    parser.add_argument("stack", choices=sorted(n for n in stacks.STACKS if not stacks.is_kit_env(n)))
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
    for note in record["notes"]:
        print(f"  {note}")
    for m in record["missing"]:
        print(f"  not installed: {m['requirement']} ({m['why']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
