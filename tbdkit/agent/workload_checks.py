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


class Checker:
    """The checks of one model on one framework, each an Outcome."""

    def __init__(self, model: catalog.Model, framework: str) -> None:
        self.model, self.framework = model, framework
        self.settings = check_settings.of(model, framework)
        self.smoke = model.hp("smoke")
        self.standard: list[float] | None = None  # the learning check's losses, for the parity legs

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
            losses = fixed_batch_losses(adapter(self.model, self.framework, hp), self.model, hp, spec.batch_size,
                                        spec.steps)  # fmt: skip
            if variant is None:
                self.standard = losses
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
            return [*first, *(self.skipped(c, "the contract's gaps come first") for c in _TABLES)]
        checks: list[Callable[[], Outcome | list[Outcome]]] = [self.parameters, self.paper_parameters, self.learning,
                                                               self.math_modes]  # fmt: skip
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
