"""python -m tbdkit.describe.server FRAMEWORK: many `python -m tbdkit.describe` runs from one process of the
framework's stack. It imports the framework and the kit's describe code once, and each requested model's files
before its first run; each run is a forked child, so it starts from that imported state and ends with its
process, as a fresh `python -m tbdkit.describe` would, without paying the imports again (TensorFlow's and Keras'
9 s of CPU, PyTorch's and torchvision's 7 s, on a 2-core machine).

One request per line of stdin, JSON: {"argv": [...], "stdout": path, "stderr": path}: the child runs
tbdkit.describe.network.main(argv) with its standard output and error going to those files. One reply per
request on stdout, JSON: {"exit": the child's exit status, or minus the signal that ended it}. The server ends
when its stdin does."""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import TextIO

from tbdkit.describe import network
from tbdkit.spec import catalog


def _preload(argv: list[str]) -> None:
    """The requested model's workload and data files, imported here so that every later child shares them.
    A file that fails to import is left for the child to import again (and say why)."""
    try:
        args, _ = network.parser().parse_known_args(argv)
        model = catalog.get(args.model)
    except (Exception, SystemExit):  # no model named, or an unknown one: the child says so
        return
    for part in (args.framework, "data"):
        if (model.folder / f"{part}.py").is_file():
            try:
                catalog.load_module(model, part)
            except Exception:  # the child imports it again and says why it fails
                sys.modules.pop(f"tbdkit_workloads.{model.name}.{part}", None)


def _child(request: dict[str, str | list[str]]) -> None:
    """Runs one describe with its stdout and stderr in the request's files; never returns."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # the requests are the server's
        for fd, key in ((1, "stdout"), (2, "stderr")):
            opened = os.open(str(request[key]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        argv = request["argv"]
        code = network.main(list(argv))
    except SystemExit as exc:  # argparse's refusal, as `python -m tbdkit.describe` would exit
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child's traceback is its stderr, as a process of its own
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(framework: str, requests: TextIO, replies: TextIO) -> None:
    importlib.import_module(f"tbdkit.adapters.{framework}")
    importlib.import_module(f"tbdkit.describe.{framework}")
    for line in requests:
        request = json.loads(line)
        _preload(request["argv"])
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve(sys.argv[1], sys.stdin, sys.stdout)
