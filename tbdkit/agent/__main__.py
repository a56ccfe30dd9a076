"""python -m tbdkit.agent --spec SPEC --run-dir DIR: measure one run where the framework is."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tbdkit import spec as specs
from tbdkit.errors import UserError


def limit_memory(extra_mb: int) -> None:
    """Cap the address space at what the agent holds now plus `extra_mb`."""
    import resource

    import psutil

    held = psutil.Process().memory_info().vms
    limit = held + extra_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    logging.getLogger("tbdkit.agent").info("memory limit: %d MiB above the %d MiB held at start",
                                          extra_mb, held // 2**20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbdkit.agent")
    parser.add_argument("--spec", required=True, type=Path)
    parser.add_argument("--run-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        run_spec = specs.load(args.spec)
    except UserError as exc:
        print(f"tbdkit agent: {exc}", file=sys.stderr)
        return 2
    if run_spec.memory_limit_mb:
        limit_memory(run_spec.memory_limit_mb)
    from tbdkit.agent.run import execute  # imports the framework adapter's dependencies

    return execute(run_spec, args.run_dir)


if __name__ == "__main__":
    sys.exit(main())
