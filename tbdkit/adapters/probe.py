"""`python -m tbdkit.adapters.probe FRAMEWORK`, run by the framework stack's own interpreter: prints
{"gpus": n, "reason": why none} as the framework itself sees it (its build, the driver, the devices).
The CLI's `--preset auto` and `--device cuda` checks go by this, not by the host's NVML."""

from __future__ import annotations

import importlib
import json
import sys


def main(argv: list[str]) -> int:
    framework = argv[0]
    gpus, reason = importlib.import_module(f"tbdkit.adapters.{framework}").gpu_probe()
    print(json.dumps({"framework": framework, "gpus": gpus, "reason": reason}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
