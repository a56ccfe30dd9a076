"""`make lock`: regenerate every lock in locks/ from pyproject.toml with uv (`uv pip compile --generate-hashes`).

uv resolves against its default index (PyPI, or UV_INDEX_URL) and records the hash of every file of
each pinned version there, so a lock installs on any Linux x86_64 machine of its Python version.
Resolving reads only the packages' metadata (PEP 658), never the wheels: torch's 3 GB are not
downloaded to lock it. Installing is another matter (tbdkit.env.stacks: uv is pointed at pip's configured
wheel folders and file indexes first).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from tbdkit.core import atomic
from tbdkit.core.errors import UserError
from tbdkit.core.paths import KIT_ROOT
from tbdkit.env import locks
from tbdkit.env.installer import uv_binary


def compile_command(uv: str, env: locks.LockEnv, out: Path) -> list[str]:
    cmd = [
        uv,
        "pip",
        "compile",
        str(KIT_ROOT / "pyproject.toml"),
        "--generate-hashes",
        "--quiet",
        "--no-header",
        "--python-version",
        env.python,
        "--python-platform",
        locks.PLATFORM,
        "-o",
        str(out),
    ]
    for extra in env.extras:
        cmd += ["--extra", extra]
    return cmd


def generate(env: locks.LockEnv, uv: str, upgrade: bool = False) -> Path:
    """Write env's lock atomically: its header (inputs and their digest), then uv's pins and hashes. The
    lock's present pins are kept where pyproject.toml still allows them, unless `upgrade`."""
    project = locks.pyproject()
    env.file.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tbdkit-lock-") as tmp:
        body = Path(tmp) / "body.txt"
        if env.file.exists() and not upgrade:
            # uv keeps the versions an existing output file pins where the requirements still allow them:
            # editing one requirement moves only what it must, not every package to the newest release.
            body.write_text(env.file.read_text())
        proc = subprocess.run(compile_command(uv, env, body), capture_output=True, text=True, cwd=KIT_ROOT)
        if proc.returncode != 0:
            raise UserError(
                f"uv could not lock '{env.name}' (exit {proc.returncode}): "
                f"{proc.stderr.strip()[-2000:]}\nFix pyproject.toml's requirements, then run `make lock` again."
            )
        text = locks.header(env, project) + body.read_text().replace(str(KIT_ROOT) + "/", "")
    atomic.write_text(env.file, text)
    return env.file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbdkit.env.lockgen", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"locks to regenerate (default: all of {', '.join(locks.ENVS)})")
    parser.add_argument(
        "--upgrade",
        action="store_true",
        help="resolve every package afresh (default: keep the present pins that still fit)",
    )
    args = parser.parse_args(argv)
    uv = uv_binary()
    if uv is None:
        print(
            "uv is not installed here: `pip install uv` into the kit's environment (it is in the test extra), "
            "then run `make lock` again.",
            file=sys.stderr,
        )
        return 2
    try:
        for name in args.names or list(locks.ENVS):
            path = generate(locks.get(name), uv, upgrade=args.upgrade)
            print(
                f"{path.relative_to(KIT_ROOT)}: {len(locks.pins(path.read_text()))} packages, "
                f"digest {locks.digest(path)}"
            )
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
