"""A probe's result and its verdict: `trusted`, `off by X` or `unsupported: why`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

TRUSTED = "trusted"


@dataclass(frozen=True)
class Tolerance:
    """|measured - expected| <= absolute + relative x |expected|."""

    relative: float = 0.0
    absolute: float = 0.0

    def allows(self, expected: float, measured: float) -> bool:
        return abs(measured - expected) <= self.absolute + self.relative * abs(expected)

    @property
    def text(self) -> str:
        parts = ([f"{self.relative:.1%}"] if self.relative else []) + ([f"{self.absolute:g}"] if self.absolute else [])
        return "+-" + " + ".join(parts or ["0"])


@dataclass
class ProbeResult:
    instrument: str  # what is calibrated, e.g. "cpu.process_cpu_utilization"; the metric names it covers below
    probe: str  # the workload with a known answer
    expected: float | None
    measured: float | None
    unit: str
    tolerance: Tolerance
    verdict: str  # "trusted", "off by X", "unsupported: why"
    metrics: tuple[str, ...] = ()  # summary.json metric names this instrument produces
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """trusted / off / unsupported: the verdict's kind."""
        return self.verdict.split(" ", 1)[0].rstrip(":")

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["tolerance"] = {"relative": self.tolerance.relative, "absolute": self.tolerance.absolute}
        out["metrics"] = list(self.metrics)
        out["status"] = self.status
        return out

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ProbeResult:
        """The inverse of as_json: a probe that ran in another interpreter (a framework stack) and
        printed its result."""
        tol = doc.get("tolerance") or {}
        return cls(
            doc["instrument"],
            doc["probe"],
            doc.get("expected"),
            doc.get("measured"),
            doc.get("unit", ""),
            Tolerance(tol.get("relative", 0.0), tol.get("absolute", 0.0)),
            doc["verdict"],
            tuple(doc.get("metrics") or ()),
            dict(doc.get("details") or {}),
        )


def judge(expected: float, measured: float, tolerance: Tolerance, unit: str) -> str:
    """`trusted` within tolerance, else `off by` the signed difference (relative where it means something)."""
    if tolerance.allows(expected, measured):
        return TRUSTED
    diff = measured - expected
    if expected:
        return f"off by {diff:+.3g} {unit} ({diff / abs(expected):+.1%})".replace("  ", " ")
    return f"off by {diff:+.3g} {unit}"


def unsupported(why: str) -> str:
    return f"unsupported: {why}"
