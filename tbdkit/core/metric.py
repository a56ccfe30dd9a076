"""Every number on disk carries its unit and how it was measured; unmeasurable ones say why."""

from __future__ import annotations

import math
from typing import Any


def metric(
    value: float | int | None, unit: str, method: str, *, reason: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A measured value with its unit and method; `value=None` requires the reason it is missing. A value
    that is not a finite number (NaN, infinity: a division by a zero time, an empty mean) is null with
    that said: summary.json holds only numbers JSON has, which readers check (tbdkit.results.summary)."""
    if value is not None and not math.isfinite(value):
        reason = f"{reason + '; ' if reason else ''}the measurement gave {value}, not a finite number"
        value = None
    if value is None and not reason:
        raise ValueError("a metric without a value must say why")
    out: dict[str, Any] = {"value": None if value is None else round(float(value), 6), "unit": unit, "method": method}
    if value is None:
        out["reason"] = reason
    out.update(extra)
    return out


def missing(unit: str, method: str, reason: str) -> dict[str, Any]:
    return metric(None, unit, method, reason=reason)
