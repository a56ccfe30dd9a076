"""python -m tbdkit.describe --model M --framework F [--preset P]: the network as built by one
framework, in canonical form (tbdkit.canonical), as JSON on stdout. Runs in that framework's stack."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tbdkit import canonical, catalog
from tbdkit.adapters import load as load_adapter


def describe(model_name: str, framework: str, preset: str) -> dict[str, Any]:
    model = catalog.get(model_name)
    catalog.check_framework(model, framework)
    hp = model.hp(preset)
    data = catalog.load_module(model, "data")
    workload = catalog.load_module(model, framework)
    adapter: Any = load_adapter(framework, workload=workload, hp=hp, device="cpu", precision="fp32", seed=0)
    batch = data.reference_batch(hp)
    inputs = adapter.prepare(batch)
    layers = sys.modules[type(adapter).__module__].canonical_layers(
        adapter.training.model, lambda: workload.forward(adapter.training, inputs))
    reference = {"input_shape": list(batch.features.shape[1:]), "work": batch.work,
                 "work_unit": model.throughput_unit.removesuffix("/s")}
    env = adapter.environment()
    return {"model": model_name, "framework": framework, "framework_version": env.get("framework_version"),
            "preset": preset, **canonical.report(layers, reference),
            "framework_state": {k: v for k, v in adapter.model_info().items() if k == "non_trainable_state"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbdkit.describe")
    parser.add_argument("--model", required=True)
    parser.add_argument("--framework", required=True)
    parser.add_argument("--preset", default="smoke")
    args = parser.parse_args(argv)
    print(json.dumps(describe(args.model, args.framework, args.preset)))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def in_stack(model_name: str, framework: str, preset: str) -> dict[str, Any]:
    """Host side: run `describe` in the framework's stack and return its JSON (UserError if it cannot)."""
    import subprocess

    from tbdkit import stacks
    from tbdkit.errors import UserError

    model = catalog.get(model_name)
    catalog.check_framework(model, framework)
    model.hp(preset)
    python = stacks.require(framework)
    proc = subprocess.run([str(python), "-m", "tbdkit.describe", "--model", model_name, "--framework", framework,
                           "--preset", preset], capture_output=True, text=True, env=stacks.agent_env())
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"Describing {model_name} on {framework} failed in its stack (exit {proc.returncode}: "
                        f"{last}): run `tbdkit setup {framework} --force` if the stack is damaged.")
    return json.loads(proc.stdout)
