"""python -m tbdkit.agent --spec SPEC --run-dir DIR: measure one run where the framework is."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from pathlib import Path

from tbdkit.core.errors import UserError
from tbdkit.spec import run_spec as specs


def main(argv: list[str] | None = None, exiting: bool = False) -> int:
    """The run; `exiting`: the process ends when this returns (python -m tbdkit.agent)."""
    parser = argparse.ArgumentParser(prog="python -m tbdkit.agent")
    parser.add_argument("--spec", required=True, type=Path)
    parser.add_argument("--run-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        run_spec = specs.load(args.spec)
    except UserError as exc:
        print(f"tbdkit agent: {exc}", file=sys.stderr)
        return 2
    from tbdkit.agent.run import execute  # imports the framework adapter's dependencies

    code = execute(run_spec, args.run_dir)
    if exiting and run_spec.framework in FREEZE_AT_EXIT:
        gc.freeze()
    return code


# The run folder is finished and every file closed when `execute` returns: in these frameworks' agents the objects
# left (the framework's whole module graph) go to the collector's permanent generation, so that the interpreter's
# exit does not walk them in full collections (docs/measured-here.md); atexit handlers, logging's flush and
# reference-counted finalizers still run. Not MXNet's: its distributed kvstore ends ps-lite's threads in a
# finalizer that only the exit's collection reaches (frozen, the worker aborted at exit).
FREEZE_AT_EXIT = frozenset({"pytorch", "tensorflow"})


if __name__ == "__main__":
    sys.exit(main(exiting=True))
