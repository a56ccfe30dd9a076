"""The agent's output as people read it, for launch files the kit renders (torchrun.sh): the agent's event
lines as sentences, its other lines (its log on stderr) as they are, on the terminal and in the node's log.

    torchrun ... 2>&1 | python -m tbdkit.launch.human --log RUN_DIR/log.txt --label deepspeech2/pytorch
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import IO, Any

from tbdkit.core.events import parse

PROGRESS_EVERY_S = 10.0  # a progress line at most this often (the kit's own launchers draw a bar instead)


def sentence(event: dict[str, Any]) -> str | None:
    """One event of the agent's as a line of text (None: nothing to say)."""
    kind = event.get("event")
    if kind == "phase":
        cap = event.get("cap_s")
        return f"{event.get('phase')}" + (f" (cap {cap:g} s)" if isinstance(cap, (int, float)) else "")
    if kind in ("compile_done", "warmup_done"):
        what = "compile phase" if kind == "compile_done" else "warm-up"
        return (
            f"{what} ended after {event.get('iterations')} iterations "
            f"({event.get('seconds', 0.0):.1f} s, {event.get('end_reason')})"
        )
    if kind == "progress":
        rate, ci = event.get("throughput"), event.get("ci_relative")
        return (
            f"{event.get('phase')}: iteration {event.get('iteration')}, {event.get('elapsed_s', 0.0):.0f} s"
            + (f", {rate:,.2f}/s" if isinstance(rate, (int, float)) else "")
            + (f" ±{ci:.1%}" if isinstance(ci, (int, float)) else "")
        )
    if kind == "done":
        return f"done: {event.get('status')}" + (f" ({event['error']})" if event.get("error") else "")
    if kind in ("warning", "error"):
        return f"{kind}: {event.get('message')}"
    return None


def relay(lines: IO[str], log: IO[str], out: IO[str], label: str) -> None:
    """Events as sentences (progress at most every PROGRESS_EVERY_S), the other lines as they are, on `out`
    and into `log`."""
    last_progress = 0.0
    for line in lines:
        event = parse(line)
        if event is None:
            log.write(line)
            out.write(line)
        else:
            if event.get("event") == "progress":
                if time.monotonic() - last_progress < PROGRESS_EVERY_S:
                    continue
                last_progress = time.monotonic()
            text = sentence(event)
            if text is not None:
                log.write(f"{label}: {text}\n")
                out.write(f"{label}: {text}\n")
        log.flush()
        out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--log", required=True, help="the node's log file (appended to)")
    parser.add_argument("--label", default="tbdkit", help="what each printed line starts with")
    args = parser.parse_args(argv)
    with open(args.log, "a", encoding="utf-8", errors="replace") as log:
        relay(sys.stdin, log, sys.stdout, args.label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
