"""`python -m tbdkit.launch.finish_rendered --run-dir D --exit-code N [--every-node-ended]`: the last step of a
job the kit rendered (torchrun.sh, the Slurm batch scripts, the Kubernetes pod of index 0, compose's node0),
which finishes its run folder as the kit's launchers finish theirs: tbdkit.launch.outcome.finalize, then the
worker that failed first named (tbdkit.launch.workers). A module of its own, which tbdkit.launch does not
import, so that `python -m` runs it without runpy's warning of a module found imported already."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tbdkit.core.errors import UserError, exit_code
from tbdkit.launch.outcome import finalize, shell_status
from tbdkit.results import files as runfiles
from tbdkit.results.rundir import RunDir
from tbdkit.spec import run_spec as specs

PROG = "python -m tbdkit.launch.finish_rendered"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
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
    return exit_code(PROG, lambda: finish(args.run_dir, args.exit_code, args.every_node_ended))


def finish(run_dir: Path, status: int, every_node_ended: bool) -> None:
    """The run folder `run_dir` finished after the job's training ended with shell status `status`."""
    try:
        spec = specs.load(RunDir(run_dir).spec)
    except OSError as exc:
        raise UserError(
            f"{run_dir} holds no readable spec.json ({exc.strerror or exc}): pass the run folder the job wrote, "
            "as its script names it (RUN_DIR)."
        ) from None
    except (UserError, ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested past reading, not a spec
        why = str(exc).rstrip(".") if isinstance(exc, UserError) else type(exc).__name__
        raise UserError(f"{run_dir}/spec.json is not the job's spec ({why}): render the job again.") from None
    code = shell_status(status)
    result, summary = finalize(
        run_dir,
        spec,
        code,
        lambda e: print(e.get("message", e), file=sys.stderr),
        ended=every_node_ended or spec.nodes == 1,
    )
    if spec.processes > 1:  # the worker that failed first, named as the kit's launchers name it
        from tbdkit.launch.workers import name_failed_workers

        result, _ = name_failed_workers(run_dir, spec, code, summary)
    written = RunDir(run_dir).mllog.is_file()
    print(f"{run_dir}: {result}" + (f"; {runfiles.MLLOG} written" if written else ""))


if __name__ == "__main__":
    sys.exit(main())
