"""python -m tbdkit.agent.workload_checks --folder DIR --framework F [--graph compiled]: the checks every built-in
model passes, run on one model folder in its framework's stack, on the CPU, as JSON on stdout (a list of
outcomes: check, status passed | failed | skipped, and why). `tbdkit check-workload` runs it and prints the
table; the generated tests (tests/<stack>/test_every_model_<stack>.py) assert through the same functions.

Each check's settings come from the model's workload.toml ([checks], tbdkit.spec.check_settings)."""

from __future__ import annotations

import argparse
import json
import math
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tbdkit.spec import catalog, check_settings, contract

# The math modes each stack has on a CPU: PyTorch fp32, TF32 (fp32 there) and AMP (bfloat16 autocast);
# TensorFlow's AMP is mixed_bfloat16 without loss scaling; MXNet 1.9's AMP is float16 with loss scaling, a GPU's
# (its adapter refuses it on a CPU), and its TF32 is fp32 with NVIDIA_TF32_OVERRIDE unset; the NumPy stack (the
# kit's machinery check) trains in float32 only
CPU_MATH_MODES = {"pytorch": ("fp32", "tf32", "amp"), "tensorflow": ("amp",), "mxnet": ("tf32",), "numpy": ("fp32",)}
# PyTorch's compiled check compiles with TorchDynamo and AOTAutograd and runs the graphs eagerly: inductor's C++
# code generation costs one to several CPU minutes per model on 2 cores
TORCH_COMPILE_BACKEND_ON_A_CPU = "aot_eager"


@dataclass(frozen=True)
class Outcome:
    check: str
    framework: str
    status: str  # "passed", "failed" or "skipped"
    detail: str


def loss_falls(losses: list[float], factor: float) -> str | None:
    """None where every loss is finite and the last is below factor x the first; else what went wrong."""
    if not all(math.isfinite(x) for x in losses):
        return f"a loss is not finite: {losses}"
    if not losses[-1] < losses[0] * factor:
        return f"the last loss {losses[-1]:.4g} is not below {factor} x the first {losses[0]:.4g} ({losses})"
    return None


def close_losses(got: list[float], expected: list[float], tolerance: float | None, what: str) -> str | None:
    """None where every loss is finite and (a tolerance given) within it of its counterpart, relative to the first
    expected loss; else what went wrong."""
    if len(got) != len(expected) or not all(math.isfinite(x) for x in got):
        return f"{what}: {got} (not finite, or not as many as {expected})"
    if tolerance is not None:
        worst = max(abs(g - e) for g, e in zip(got, expected)) / max(abs(expected[0]), 1e-12)
        if worst > tolerance:
            return f"{what}: {got} against {expected}: off by {worst:.2e} > {tolerance:.0e}"
    return None


def adapter(model: catalog.Model, framework: str, hp: dict[str, Any], precision: str = "fp32",
            graph: str = "standard") -> Any:  # fmt: skip
    """The framework's adapter of the model on the CPU, seed 0; compiled where `graph` says so."""
    from tbdkit.adapters import load

    compiled: dict[str, Any] = {} if graph == "standard" else {"graph": graph}
    if compiled and framework == "pytorch":
        compiled["compile_backend"] = TORCH_COMPILE_BACKEND_ON_A_CPU
    workload = catalog.load_module(model, framework)
    return load(framework, workload=workload, hp=hp, device="cpu", precision=precision, seed=0, **compiled)


def fixed_batch_losses(a: Any, model: catalog.Model, hp: dict[str, Any], batch_size: int, steps: int) -> list[float]:
    """`steps` steps through the adapter on one synthetic batch (seed 1)."""
    data = catalog.load_module(model, "data")
    inputs = a.prepare(next(data.batches("synthetic", hp, batch_size, seed=1)))
    return [a.loss_value(a.step(inputs)) for _ in range(steps)]


def fp32_again(framework: str) -> None:
    """Leave the process in fp32 after another math mode (the mode is process-wide state)."""
    module: Any = __import__(f"tbdkit.adapters.{framework}", fromlist=["Precision"])
    if framework == "pytorch":
        import torch

        module.Precision("fp32", torch.device("cpu"))
    else:
        module.Precision("fp32", on_gpu=False)


def paper_count(model: catalog.Model, framework: str, exclude: tuple[str, ...] = ()) -> int:
    """The paper preset's parameters without training: PyTorch's network built on the meta device (no memory, no
    initialization), less the parameters whose names start with an `exclude` prefix; another framework's built for
    real through its adapter (`exclude` applies to PyTorch's names only)."""
    hp = model.hp("paper")
    if framework != "pytorch":
        return int(adapter(model, framework, hp).model_info()["parameters"])
    import torch

    workload = catalog.load_module(model, "pytorch")
    with torch.device("meta"):
        network = workload.build(hp, torch.device("meta")).model
    return sum(p.numel() for n, p in network.named_parameters() if not n.startswith(exclude))


def analysis_setting(model: catalog.Model, settings: check_settings.Checks) -> tuple[dict[str, Any], int]:
    """The analyses check's hyperparameters and batch size: the learning check's (its hp over the smoke preset, its
    batch, seed 1), so that the network it trained serves, a few steps into training as a bench run's is after its
    window; the smoke preset and a batch of 1 where the model's learning is checked in its own test."""
    learning = settings.learning
    if isinstance(learning, check_settings.Learning):
        return {**model.hp("smoke"), **learning.hp}, learning.batch_size
    return model.hp("smoke"), 1


def analysed(a: Any, batch: Any) -> tuple[str | None, str]:
    """The analyses a bench run takes after its sample window (tbdkit.agent.after_window's memory breakdown, and its
    model FLOP count where the adapter has a counter), each over one training step of `batch` through adapter `a`:
    what went wrong (None: nothing), and what they measured, in a line."""
    from tbdkit.adapters import capabilities
    from tbdkit.agent import after_window
    from tbdkit.analysis import memory as memory_doc

    caps, inputs = capabilities(a), a.prepare(batch)

    def step() -> None:
        a.step(inputs)

    failures, said = [], []
    try:
        memory = after_window.memory_breakdown(a, caps, step)
        memory_doc.breakdown(a.device_label, memory["categories"], memory["peak"])  # every category is there
        failures.append(memory_gaps(memory["categories"]))
        said.append(memory_line(memory["categories"]))
    except Exception as exc:
        failures.append(raised("the memory breakdown", exc))
    try:
        flops, no_counter = after_window.step_flops(a, caps, step)
        if flops is not None and not flops > 0:
            failures.append(f"the FLOP count counted {flops} FLOPs in a training step of {batch.samples} samples")
        said.append(f"FLOPs not counted: {no_counter}" if flops is None else
                    f"{_scaled(flops / batch.samples, 1000, DECIMAL, 'FLOP')} per sample")  # fmt: skip
    except Exception as exc:
        failures.append(raised("the FLOP count", exc))
    failed = [f for f in failures if f]
    return ("; ".join(failed) if failed else None), "; ".join(said)


def memory_gaps(cats: dict[str, dict[str, Any]]) -> str | None:
    """None where the weights have bytes and every other category has bytes or the reason it has none."""
    weights = cats["weights"]
    if not weights["bytes"]:
        return f"the memory breakdown counted no weights ({weights['bytes']} bytes: {weights['reason']})"
    gaps = [c for c, e in cats.items() if not (isinstance(e["bytes"], int) and e["bytes"] >= 0) and not e["reason"]]
    return f"the memory breakdown left {', '.join(gaps)} without bytes or a reason" if gaps else None


def memory_line(cats: dict[str, dict[str, Any]]) -> str:
    """'memory: weights 2.64 KiB, ...; null with a reason: workspace' (a bench run's memory.json holds each reason)."""
    measured = [
        f"{c.replace('_', ' ')} {_scaled(e['bytes'], 1024, BINARY, 'B')}"
        for c, e in cats.items()
        if e["bytes"] is not None
    ]
    unmeasured = [c.replace("_", " ") for c, e in cats.items() if e["bytes"] is None]
    return "memory: " + ", ".join(measured) + (f"; null with a reason: {', '.join(unmeasured)}" if unmeasured else "")


def raised(what: str, exc: BaseException) -> str:
    """One sentence: what raised, the exception's type and its message's last line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{what} raised {type(exc).__name__}" + (f": {lines[-1]}" if lines else "")


BINARY, DECIMAL = ("", "Ki", "Mi", "Gi", "Ti"), ("", "k", "M", "G", "T", "P")


def _scaled(value: float, base: int, prefixes: tuple[str, ...], unit: str) -> str:
    """'2.64 KiB', '2.82 kFLOP': `value` in the largest of the prefixes' units it reaches."""
    n = 0
    while n + 1 < len(prefixes) and value >= base ** (n + 1):
        n += 1
    return f"{value / base**n:.3g} {prefixes[n]}{unit}"


class Checker:
    """The checks of one model on one framework, each an Outcome."""

    def __init__(self, model: catalog.Model, framework: str) -> None:
        self.model, self.framework = model, framework
        self.settings = check_settings.of(model, framework)
        self.smoke = model.hp("smoke")
        self.standard: list[float] | None = None  # the learning check's losses, for the parity legs
        self.trained: Any = None  # the learning check's adapter (the model's own setting), for the analyses

    def outcome(self, check: str, failure: str | None, passed: str) -> Outcome:
        return Outcome(check, self.framework, "failed" if failure else "passed", failure or passed)

    def skipped(self, check: str, why: str) -> Outcome:
        return Outcome(check, self.framework, "skipped", why)

    def missing(self, check: str, table: str) -> Outcome:
        path = self.model.folder / "workload.toml"
        return Outcome(check, self.framework, "failed", f"{path} has no {table}: add it ({_TABLES[check]}).")

    def contract(self) -> Outcome:
        gaps = contract.data_gaps(self.model) + contract.framework_gaps(self.model, self.framework)
        return self.outcome("contract", " ".join(gaps) or None, "data.py and the framework file meet the contract")

    def model_code(self) -> Outcome:
        gaps = contract.code_gaps(self.model, self.framework)
        return self.outcome("model code only", " ".join(gaps) or None, "no timing, logging, profiling or copied step")

    def parameters(self) -> Outcome:
        expected = self.settings.smoke_parameters
        if expected is None:
            return self.missing("parameters", "[checks] smoke_parameters")
        counted = adapter(self.model, self.framework, self.smoke).model_info()["parameters"]
        failure = None if counted == expected else f"counted {counted:,} parameters, [checks] says {expected:,}"
        return self.outcome("parameters", failure, f"{counted:,} on the smoke preset, as [checks] says")

    def paper_parameters(self) -> Outcome:
        published = self.model.info.get("params_millions")
        if published is None:
            return self.skipped("paper parameters", "workload.toml's [model] gives no params_millions (published size)")
        spec = self.settings.paper_parameters
        if self.framework != "pytorch" and "pytorch" in self.model.frameworks:
            return self.skipped("paper parameters", "counted on PyTorch's meta device; the smoke counts of the "
                                "frameworks are held equal by the same-network check")  # fmt: skip
        counted = paper_count(self.model, self.framework, spec.exclude)
        left_out = f" less {', '.join(spec.exclude)}" if spec.exclude else ""
        said = f"{counted:,}{left_out} on the paper preset, params_millions {published:g} M"
        if spec.expected is not None:  # a known difference from the published count, said why
            failure = None if counted == spec.expected else f"counted {counted:,}, [checks] expects {spec.expected:,}"
            return self.outcome("paper parameters", failure, f"{said}: {spec.differs}")
        off = abs(counted / 1e6 - published) / published
        failure = None if off <= spec.rel else f"{said}: off by {off:.1%} (more than {spec.rel:g})"
        return self.outcome("paper parameters", failure, f"{said} (within {spec.rel:g})")

    def learning(self) -> Outcome:
        spec = self.settings.learning
        if spec is None:
            return self.missing("learning", "[checks.learning]")
        if isinstance(spec, check_settings.Elsewhere):
            return self.skipped("learning", f"the model's own test {spec.test} checks it")
        details = []
        for variant in spec.variants:
            hp = {**self.model.hp("smoke", variant), **spec.hp}
            a = adapter(self.model, self.framework, hp)
            losses = fixed_batch_losses(a, self.model, hp, spec.batch_size, spec.steps)
            if variant is None:
                self.standard, self.trained = losses, a
            failure = loss_falls(losses, spec.factor)
            if failure:
                return self.outcome("learning", f"{variant or 'smoke'}: {failure}", "")
            details.append(f"{variant or 'smoke'}: {losses[0]:.4g} to {losses[-1]:.4g} in {spec.steps} steps")
        return self.outcome("learning", None, "; ".join(details))

    def math_modes(self) -> Outcome:
        spec = self.settings.math_modes
        if spec is None:
            return self.missing("math modes", "[checks.math_modes]")
        if isinstance(spec, check_settings.Elsewhere):
            return self.skipped("math modes", f"the model's own test {spec.test} checks them")
        hp = {**self.smoke, **spec.hp}
        batch = next(catalog.load_module(self.model, "data").batches("synthetic", hp, spec.batch_size, seed=spec.seed))
        losses, refused = {}, {}
        try:
            for mode in CPU_MATH_MODES[self.framework]:
                try:
                    a = adapter(self.model, self.framework, hp, precision=mode)
                except RuntimeError as exc:  # a mode the stack refuses here, in one sentence
                    refused[mode] = str(exc)
                    continue
                losses[mode] = a.loss_value(a.step(a.prepare(batch)))
        finally:
            fp32_again(self.framework)
        bad = {m: x for m, x in losses.items() if not math.isfinite(x) or (spec.positive and x <= 0)}
        failure = f"losses {bad} (finite{' and positive' if spec.positive else ''} expected)" if bad else None
        said = ", ".join(f"{m} {x:.4g}" for m, x in losses.items()) + "".join(f"; {m} refused: {r}"
                                                                             for m, r in refused.items())  # fmt: skip
        return self.outcome("math modes", failure, said)

    def analyses(self) -> Outcome:
        """The memory breakdown and (PyTorch) the model FLOP count a bench run takes after its window, as it takes
        them (analysed), on the learning check's network and batch (analysis_setting)."""
        hp, batch_size = analysis_setting(self.model, self.settings)
        a = self.trained if self.trained is not None else adapter(self.model, self.framework, hp)
        batch = next(catalog.load_module(self.model, "data").batches("synthetic", hp, batch_size, seed=1))
        failure, said = analysed(a, batch)
        return self.outcome("analyses", failure, said)

    def parity(self) -> list[Outcome]:
        """--graph compiled and bf16: their first steps against the standard fp32 steps."""
        spec, learning = self.settings.parity or check_settings.Parity(), self.settings.learning  # none: defaults
        learns = isinstance(learning, check_settings.Learning)
        hp = {**self.smoke, **(learning.hp if learns else {}), **spec.hp}  # type: ignore[union-attr]
        batch_size = spec.batch_size or (learning.batch_size if learns else 1)  # type: ignore[union-attr]
        steps = min(spec.steps, learning.steps) if learns else spec.steps  # type: ignore[union-attr]
        if self.standard is not None and learns and all(learning.hp.get(k) == v for k, v in spec.hp.items()):  # type: ignore[union-attr]
            standard = self.standard[:steps]
        else:
            standard = fixed_batch_losses(adapter(self.model, self.framework, hp), self.model, hp, batch_size, steps)
        compiled_adapter = adapter(self.model, self.framework, hp, graph="compiled")
        compiled = fixed_batch_losses(compiled_adapter, self.model, hp, batch_size, 1 if spec.not_compiled else steps)
        record = compiled_adapter.compile_record()
        if spec.not_compiled is not None:
            failure = (None if spec.not_compiled in str(record.get("reason"))
                       else f"expected to train as standard ({spec.not_compiled}), the record says {record}")  # fmt: skip
            failure = failure or close_losses(compiled, standard[:1], spec.forward_tol, "compiled, first loss")
            out = [self.outcome("compiled", failure, f"trains as standard: {record.get('reason')}")]
        else:
            failure = (close_losses(compiled[:1], standard[:1], spec.forward_tol, "compiled, first loss")
                       if spec.compiled_tol is not None else None)  # fmt: skip
            failure = failure or close_losses(compiled, standard, spec.compiled_tol, "compiled against standard")
            out = [self.outcome("compiled", failure, f"{steps} steps within {spec.compiled_tol} of standard")]
        try:
            bf16: list[float] | str = fixed_batch_losses(adapter(self.model, self.framework, hp, precision="bf16"),
                                                         self.model, hp, batch_size, steps)  # fmt: skip
        except RuntimeError as exc:
            bf16 = str(exc)
        finally:
            fp32_again(self.framework)
        if isinstance(bf16, str):
            refused = spec.bf16_refused is not None and spec.bf16_refused in bf16
            return [*out, Outcome("bf16", self.framework, "skipped" if refused else "failed", bf16)]
        failure = close_losses(bf16, standard, spec.bf16_tol, "bf16 against fp32")
        return [*out, self.outcome("bf16", failure, f"{steps} steps within {spec.bf16_tol} of fp32")]

    def run(self, graph: str) -> list[Outcome]:
        first = [self.contract(), self.model_code()]
        if first[0].status == "failed":
            return [*first, *(self.skipped(c, "the contract's gaps come first") for c in AFTER_THE_CONTRACT)]
        checks: list[Callable[[], Outcome | list[Outcome]]] = [self.parameters, self.paper_parameters, self.learning,
                                                               self.math_modes, self.analyses]  # fmt: skip
        if graph == "compiled":
            checks.append(self.parity)
        out = first
        for check in checks:
            try:
                got = check()
            except Exception as exc:  # a user's workload raised: the check failed, with the last line
                name = check.__name__.replace("_", " ")
                got = Outcome(name, self.framework, "failed", f"raised {type(exc).__name__}: {exc}"[:600])
                traceback.print_exc()
            out += got if isinstance(got, list) else [got]
        if graph != "compiled":
            out += [self.skipped(c, "--graph compiled runs it") for c in ("compiled", "bf16")]
        return out


_TABLES = {
    "parameters": "smoke_parameters = the smoke preset's parameter count",
    "paper parameters": "params_millions in [model]; [checks.paper_parameters] where the count differs",
    "learning": "batch_size, steps, factor: a few steps on one fixed batch lower the loss below factor x the first",
    "math modes": "batch_size: one step in each math mode",
    "compiled": "its tolerances; without one the defaults hold",
    "bf16": "its tolerances; without one the defaults hold",
}
# The checks after the contract, in the order they run (the analyses read the learning check's table)
AFTER_THE_CONTRACT = ("parameters", "paper parameters", "learning", "math modes", "analyses", "compiled", "bf16")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbdkit.agent.workload_checks")
    parser.add_argument("--folder", required=True, type=Path)
    parser.add_argument("--framework", required=True)
    parser.add_argument("--graph", default="standard", choices=("standard", "compiled"))
    args = parser.parse_args(argv)
    model = catalog.model_in(args.folder.resolve())
    outcomes = Checker(model, args.framework).run(args.graph)
    print(json.dumps([asdict(o) for o in outcomes]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
