"""`python -m tbdkit.launch.finish_rendered --run-dir D --exit-code N [--every-node-ended]`: the last step of a
job the kit rendered (torchrun.sh, the Slurm batch scripts, the Kubernetes pod of index 0, compose's node0),
which finishes its run folder as the kit's launchers finish theirs: tbdkit.launch.outcome.finalize, then the
worker that failed first named (tbdkit.launch.workers). A module of its own, which tbdkit.launch does not
import, so that `python -m` runs it without runpy's warning of a module found imported already."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tbdkit.launch.outcome import finalize, shell_status
from tbdkit.results import files as runfiles
from tbdkit.results.rundir import RunDir
from tbdkit.spec import run_spec as specs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbdkit.launch.finish_rendered", description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True, help="the run folder, holding its spec.json")
    parser.add_argument(
        "--exit-code", type=int, required=True, help="the job's exit status on this node, as the shell gives it"
    )
    parser.add_argument(
        "--every-node-ended",
        action="store_true",
        help="every process of the job has ended on every node (srun returned), so what they left unfinished "
        "can go; a one-node job's have ended without it",
    )
    args = parser.parse_args(argv)
    spec = specs.load(RunDir(args.run_dir).spec)
    code = shell_status(args.exit_code)
    status, summary = finalize(
        args.run_dir,
        spec,
        code,
        lambda e: print(e.get("message", e), file=sys.stderr),
        ended=args.every_node_ended or spec.nodes == 1,
    )
    if spec.processes > 1:  # the worker that failed first, named as the kit's launchers name it
        from tbdkit.launch.workers import name_failed_workers

        status, _ = name_failed_workers(args.run_dir, spec, code, summary)
    written = RunDir(args.run_dir).mllog.is_file()
    print(f"{args.run_dir}: {status}" + (f"; {runfiles.MLLOG} written" if written else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
