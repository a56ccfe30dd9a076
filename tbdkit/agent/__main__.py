"""python -m tbdkit.agent --spec SPEC --run-dir DIR: measure one run where the framework is."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from pathlib import Path

from tbdkit.core.errors import UserError
from tbdkit.spec import run_spec as specs


def main(argv: list[str] | None = None) -> int:
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

    return execute(run_spec, args.run_dir)


if __name__ == "__main__":
    code = main()
    # The run folder is finished and every file closed: the objects left (a framework's whole module graph) go to
    # the collector's permanent generation, so that the interpreter's exit does not walk them in full collections
    # (docs/measured-here.md); atexit handlers, logging's flush and reference-counted finalizers still run.
    gc.freeze()
    sys.exit(code)
