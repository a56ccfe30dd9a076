"""What `tbdkit check-workload` (and the generated tests, which run the same checks) needs per model and framework:
the `[checks]` table of the model's workload.toml. A key of a check's table holds for every framework; a
`[checks.<check>.<framework>]` table overrides it for one.

    [checks]
    smoke_parameters = 25_557_032            # the smoke preset's parameters as the adapter counts them
    [checks.learning]                        # a few fp32 steps on one fixed synthetic batch lower the loss
    batch_size = 4
    steps = 5
    factor = 0.8                             # the last loss below factor x the first
    [checks.math_modes]                      # one step in each math mode the stack has
    batch_size = 2
    [checks.parity]                          # --graph compiled and bf16 against the standard steps
    bf16_tol = 0.2
    [checks.paper_parameters]                # the paper preset's count against [model] params_millions
    exclude = ["AuxLogits."]                 # what the published count leaves out (PyTorch's names)
    [checks.learning.mxnet]
    hp = {learning_rate = 0.02}

A check a model cannot take in this form names the model's own test instead (`elsewhere = "test_name"`).

A model with several frameworks also has its outputs compared: PyTorch's weights (the first framework's), moved
through describe's canonical layout into each other framework, give the same outputs on data.py's probe batch.

    [checks.outputs.compare]                 # an output's tolerance (default: every output, atol = rtol = 1e-4)
    output = {atol = 1e-5, scale = "largest_or_1"}   # atol x the largest |value| (at least 1) of the first's
    [checks.outputs.tensorflow]              # one framework's own: nothing compared, every output finite
    compare = {}
    finite = ["*"]"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from tbdkit.core.errors import UserError
from tbdkit.core.frameworks import KNOWN_FRAMEWORKS

try:
    import tomllib  # novermin
except ModuleNotFoundError:  # Python 3.10 (the MXNet image): tomli is the same parser
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass(frozen=True)
class Learning:
    """A few fp32 steps on one fixed synthetic smoke batch (seed 1): finite losses, the last below `factor` x the
    first. `hp` overrides the smoke preset; `variants` are the [setting.*] also trained (None: the model's own)."""

    batch_size: int
    steps: int
    factor: float
    hp: dict[str, Any] = field(default_factory=dict)
    variants: tuple[str | None, ...] = (None,)


@dataclass(frozen=True)
class Elsewhere:
    """The check is specific to the model and lives in its own test file, in the test named."""

    test: str


@dataclass(frozen=True)
class MathModes:
    """One smoke step in each math mode the stack has (amp: bf16 on a CPU), from a synthetic batch of `batch_size`
    (`seed`); `hp` overrides the smoke preset; `positive`: each loss is above 0."""

    batch_size: int = 1
    hp: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    positive: bool = False


@dataclass(frozen=True)
class Parity:
    """The first `steps` steps of the learning check (its batch, its seed, its fixed batch) again, compiled
    (--graph compiled) and in bf16, against the standard fp32 losses. Compiled: the first loss within
    `forward_tol`, every loss within `compiled_tol`; bf16: every loss within `bf16_tol`; each relative to the
    first fp32 loss. A tolerance of None: finite losses only (the setting draws its random numbers otherwise).
    `hp`: overrides for both legs; `batch_size`: for a model whose learning check is elsewhere; `not_compiled`:
    (a part of) the reason the compile record gives for a cell that trains as standard; `bf16_refused`: (a part
    of) the refusal of a cell that cannot train in bf16."""

    steps: int = 3
    compiled_tol: float | None = 1e-3
    bf16_tol: float | None = 0.1
    hp: dict[str, Any] = field(default_factory=dict)
    batch_size: int | None = None
    not_compiled: str | None = None
    bf16_refused: str | None = None
    forward_tol: float = 1e-4


@dataclass(frozen=True)
class PaperParameters:
    """The paper preset's parameters, counted without training (PyTorch: built on the meta device), against [model]
    params_millions: within `rel` of it, less the parameters whose (PyTorch) names start with an `exclude` prefix
    (what the published count leaves out). Where the network's count differs from the published one for a known
    reason, `expected` is the network's exact count and `differs` says why."""

    rel: float = 0.01
    exclude: tuple[str, ...] = ()
    expected: int | None = None
    differs: str | None = None


@dataclass(frozen=True)
class Checks:
    """One model's check settings on one framework (None: the model's workload.toml has no such table)."""

    smoke_parameters: int | None
    learning: Learning | Elsewhere | None
    math_modes: MathModes | Elsewhere | None
    parity: Parity | None
    same_draw: str | None  # why one draw gives several initial weights on this framework, where it does
    paper_parameters: PaperParameters = PaperParameters()


@dataclass(frozen=True)
class Tolerance:
    """How close one output of a framework must be to the first framework's: |ours - theirs| <= atol x s + rtol x
    |theirs|, where s is 1, the largest |value| of theirs ("largest") or that but at least 1 ("largest_or_1")."""

    atol: float = 0.0
    rtol: float = 0.0
    scale: str = "one"


SCALES = ("one", "largest", "largest_or_1")
# what [checks.outputs] holds where a model has none: every output within 1e-4 (absolute and relative)
EVERY_OUTPUT = "*"


@dataclass(frozen=True)
class Outputs:
    """The outputs compared on one framework against the first framework's, each with its tolerance (`*`: every
    output, and the same outputs in both), and the outputs (fnmatch patterns) that need only be finite."""

    compare: dict[str, Tolerance] = field(default_factory=lambda: {EVERY_OUTPUT: Tolerance(1e-4, 1e-4)})
    finite: tuple[str, ...] = ()


CHECKS = ("learning", "math_modes", "parity")
_NONE = "none"  # a tolerance of None in TOML, which has no null


def _merged(table: dict[str, Any] | None, framework: str) -> dict[str, Any] | None:
    """A check's keys for every framework, then the framework's own table over them (None: no such table)."""
    if table is None:
        return None
    common = {k: v for k, v in table.items() if k not in KNOWN_FRAMEWORKS}
    return {**common, **table.get(framework, {})}


def _build(kind: type, values: dict[str, Any], where: str) -> Any:
    if "elsewhere" in values:
        return Elsewhere(str(values["elsewhere"]))
    names = {f.name for f in fields(kind)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise UserError(f"{where} has unknown keys {', '.join(unknown)}: use {', '.join(sorted(names))}.")
    given = {k: (None if v == _NONE else v) for k, v in values.items()}
    if "variants" in given:  # "" is the model's own setting
        given["variants"] = tuple(v or None for v in values["variants"])
    try:
        return kind(**given)
    except TypeError as exc:
        raise UserError(f"{where} is incomplete ({exc}): add the missing keys.") from None


def from_table(checks: dict[str, Any], framework: str, where: str = "[checks]") -> Checks:
    """The settings of one framework from a workload.toml's parsed [checks] table."""
    learning = _merged(checks.get("learning"), framework)
    modes = _merged(checks.get("math_modes"), framework)
    parity = _merged(checks.get("parity"), framework)
    same_draw = checks.get("same_draw", {}).get(framework)
    parameters = checks.get("smoke_parameters")
    paper = _merged(checks.get("paper_parameters"), framework) or {}
    if "exclude" in paper:
        paper["exclude"] = tuple(paper["exclude"])
    return Checks(
        smoke_parameters=int(parameters) if parameters is not None else None,
        learning=None if learning is None else _build(Learning, learning, f"{where} learning ({framework})"),
        math_modes=None if modes is None else _build(MathModes, modes, f"{where} math_modes ({framework})"),
        parity=None if parity is None else _build(Parity, parity, f"{where} parity ({framework})"),
        same_draw=None if same_draw is None else str(same_draw),
        paper_parameters=_build(PaperParameters, paper, f"{where} paper_parameters ({framework})"),
    )


def outputs_from_table(checks: dict[str, Any], framework: str, where: str = "[checks]") -> Outputs:
    """The output comparison of one framework from a workload.toml's parsed [checks] table."""
    table = _merged(checks.get("outputs"), framework)
    if table is None:
        return Outputs()
    where = f"{where} outputs ({framework})"
    unknown = sorted(set(table) - {"compare", "finite"})
    if unknown:
        raise UserError(f"{where} has unknown keys {', '.join(unknown)}: use compare and finite.")
    compare = {}
    for key, given in table.get("compare", {}).items():
        tolerance = _build(Tolerance, given, f"{where} compare.{key}")
        if tolerance.scale not in SCALES:
            raise UserError(f"{where} compare.{key} has scale {tolerance.scale!r}: use one of {', '.join(SCALES)}.")
        compare[key] = tolerance
    return Outputs(compare, tuple(table.get("finite", ())))


def outputs_of(model: Any, framework: str) -> Outputs:
    """The output comparison of a catalog model on one framework (not its first)."""
    path = model.folder / "workload.toml"
    return outputs_from_table(tomllib.loads(path.read_text()).get("checks", {}), framework, f"{path}'s [checks]")


def of(model: Any, framework: str) -> Checks:
    """The settings of a catalog model (tbdkit.spec.catalog.Model) on one framework."""
    path = model.folder / "workload.toml"
    table = tomllib.loads(path.read_text()).get("checks", {})
    return from_table(table, framework, f"{path}'s [checks]")


def bench_framework(model: Any) -> str:
    """The framework whose agent benches the model's smoke preset in the kit's CI: `[checks] bench_framework`, else
    the first framework the model has."""
    table = tomllib.loads((model.folder / "workload.toml").read_text()).get("checks", {})
    return str(table.get("bench_framework", model.frameworks[0]))
