"""A write the kit had begun, cut short as SIGKILL or the OOM killer cut it: a real child process inside the kit's
atomic writer (tbdkit.core.atomic.replacing), killed by SIGKILL once its temporary file exists."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

WRITER = """
import sys, time
from pathlib import Path
from tbdkit.core import atomic
with atomic.replacing(Path(sys.argv[1])) as tmp:
    tmp.write_bytes(b"half a file")
    print(tmp, flush=True)
    time.sleep(600)
"""


def killed_mid_write(path: Path) -> Path:
    """The temporary file a process killed while writing `path` left beside it."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    tmp = Path(proc.stdout.readline().strip())
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    assert tmp.is_file() and tmp.parent == path.parent, tmp
    return tmp
