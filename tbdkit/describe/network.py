"""python -m tbdkit.describe --model M --framework F [--preset P]: the network as built by one
framework, in canonical form (tbdkit.describe.canonical), as JSON on stdout. Runs in that framework's
stack; tbdkit.describe.<framework> reads the framework's layers."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from tbdkit.adapters import load as load_adapter
from tbdkit.describe import canonical
from tbdkit.spec import catalog, contract


def describe(
    model_name: str, framework: str, preset: str, weights_from: Path | None = None, save: Path | None = None
) -> dict[str, Any]:
    """The canonical description. With `weights_from` (an .npz that `save` wrote, from any framework)
    the network first takes those canonical weights; `save` writes this network's canonical weights
    and its inference-mode output on a probe batch (the data module's probe_batch, or 2 synthetic
    samples, seed 0: named outputs, log-probabilities and lengths for a (log_probs, lengths) pair, else
    `output`), so two frameworks' outputs on the same weights and inputs can be compared."""
    model = catalog.get(model_name)
    catalog.check_framework(model, framework)
    hp = model.hp(preset)
    data = catalog.load_module(model, "data")
    workload = catalog.load_module(model, framework)
    reader = importlib.import_module(f"tbdkit.describe.{framework}")
    # the framework's quicker way to build the same network (its weights, names and values unchanged), where it has one
    with getattr(reader, "building", contextlib.nullcontext)():
        adapter: Any = load_adapter(framework, workload=workload, hp=hp, device="cpu", precision="fp32", seed=0)
    batch = data.reference_batch(hp)
    inputs = adapter.prepare(batch)
    layers_of = reader.canonical_layers

    def read() -> list[canonical.Layer]:
        return canonical.name_layers(
            layers_of(adapter.training.model, lambda: workload.forward(adapter.training, inputs))
        )

    layers = read()
    if weights_from is not None:
        with np.load(weights_from) as given:
            for layer in layers:
                if layer.assign is None:  # every adapter's canonical_layers gives each layer its setter
                    raise TypeError(f"{framework}'s canonical layer {layer.name} cannot be assigned weights")
                layer.assign({k: given[f"{layer.name}/{k}"] for k in layer.params})
        layers = read()  # read back from the framework: what it now holds, in canonical layout
    if save is not None:
        # the probe: the data module's probe_batch(hp) where it has one, else 2 synthetic batches' worth
        probe_batch = getattr(data, "probe_batch", None)
        probe = adapter.prepare(probe_batch(hp) if probe_batch else next(data.synthetic_batches(hp, 2, seed=0)))
        out = workload.forward(adapter.training, probe)  # named outputs, (log_probs, lengths), or one array
        outputs = (
            out
            if isinstance(out, dict)
            else dict(zip(("log_probs", "lengths"), out))
            if isinstance(out, tuple)
            else {"output": out}
        )
        arrays = {f"{layer.name}/{k}": v for layer in layers for k, v in layer.params.items()}
        np.savez(save, **arrays, **outputs)  # type: ignore[arg-type]  # numpy's stub types **kwds as allow_pickle's bool
    # one sample's input, through the contract: the batch's first NumPy field, or data.py's own input_shape
    shape = contract.input_shape(data, batch, hp)
    reference = {"input_shape": shape, "work": batch.work, "work_unit": model.throughput_unit.removesuffix("/s")}
    env = adapter.environment()
    return {
        "model": model_name,
        "framework": framework,
        "framework_version": env.get("framework_version"),
        "preset": preset,
        **canonical.report(layers, reference),
        "framework_state": {k: v for k, v in adapter.model_info().items() if k == "non_trainable_state"},
    }


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tbdkit.describe")
    parser.add_argument("--model", required=True)
    parser.add_argument("--framework", required=True)
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--weights-from", type=Path, help="canonical weights (.npz from --save) to load first")
    parser.add_argument("--save", type=Path, help="write canonical weights and the probe batch's output here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    print(json.dumps(describe(args.model, args.framework, args.preset, args.weights_from, args.save)))
    return 0


def in_stack(model_name: str, framework: str, preset: str) -> dict[str, Any]:
    """Host side: run `describe` in the framework's stack and return its JSON (UserError if it cannot)."""
    import subprocess

    from tbdkit.core.errors import UserError
    from tbdkit.env import stacks

    model = catalog.get(model_name)
    catalog.check_framework(model, framework)
    model.hp(preset)
    python = stacks.require(framework)
    proc = subprocess.run(
        [str(python), "-m", "tbdkit.describe", "--model", model_name, "--framework", framework, "--preset", preset],
        capture_output=True,
        text=True,
        env=stacks.agent_env(),
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(
            f"Describing {model_name} on {framework} failed in its stack (exit {proc.returncode}: "
            f"{last}): run `tbdkit setup {framework} --force` if the stack is damaged."
        )
    return json.loads(proc.stdout)
