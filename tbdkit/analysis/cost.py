"""What a result costs: a price per hour turned into cost per million samples and cost of the whole run.

The kit ships no prices (they change by the week and by the provider): the user gives one, by
`--price-per-hour`, by TBDKIT_PRICE_PER_HOUR, or in a prices.toml they fill (TBDKIT_PRICES names it,
else ./prices.toml), whose prices may be per device:

    currency = "USD"
    given = "2026-11-24"          # when these prices were read: a price says when it was true
    [price_per_hour]
    "NVIDIA H100 80GB HBM3" = 2.49  # the device's name as the report names it
    default = 1.10                  # any other device

The price is applied when the results are shown (bench, sweep, report), never written into the run
files: a measured run stays true when prices change. Every cost says which price and when it was given.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tbdkit.core import user_files
from tbdkit.core.errors import UserError

try:
    import tomllib  # novermin
except ModuleNotFoundError:  # Python 3.10 (the MXNet image): tomli is the same parser
    import tomli as tomllib  # type: ignore[no-redef]
from tbdkit.core.metric import metric, missing

ENV_PRICE = "TBDKIT_PRICE_PER_HOUR"
ENV_PRICES = "TBDKIT_PRICES"
PRICES_FILE = "prices.toml"


@dataclass(frozen=True)
class Price:
    per_hour: float
    currency: str
    source: str  # where it came from: the option, the variable, or prices.toml and its key
    given: str  # when it was given (ISO 8601): now for the option and variable, the file's `given`

    @property
    def text(self) -> str:
        return f"{self.per_hour:g} {self.currency}/h ({self.source}, given {self.given})"


@dataclass(frozen=True)
class Prices:
    """The price of each device, from one source."""

    by_device: Mapping[str, float]
    currency: str
    source: str
    given: str

    def for_device(self, device: str) -> Price | None:
        key = device if device in self.by_device else "default" if "default" in self.by_device else None
        if key is None:
            return None
        return Price(self.by_device[key], self.currency, f"{self.source} [{key}]", self.given)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _positive(value: Any, where: str) -> float:
    try:
        price = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{where} is {value!r}, not a number: give the price per hour, e.g. 2.5.") from None
    if not math.isfinite(price) or price <= 0:
        raise UserError(f"{where} is {value!r}: a price per hour must be a positive number, e.g. 2.5.")
    return price


def _number(value: Any, where: str) -> float:
    """A price as the file writes it: a TOML number (true is not 1, "2.5" is not 2.5)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{where} is {value!r}, not a number: give the price per hour as a number, e.g. 2.5.")
    return float(value)


def load_file(path: Path) -> Prices:
    """A user's prices.toml; UserError naming what is wrong in it."""
    try:
        doc = user_files.load_toml(path)
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{path} is not UTF-8 text (byte {exc.start} is not): save it as UTF-8, or remove it."
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{path} cannot be read as TOML ({exc}): fix it or remove it.") from None
    table = doc.get("price_per_hour")
    if not isinstance(table, dict) or not table:
        raise UserError(f"{path} has no [price_per_hour] table: add one, e.g. default = 2.5.")
    given = doc.get("given")
    if not given:
        raise UserError(f'{path} does not say when its prices were given: add given = "YYYY-MM-DD".')
    return Prices(
        {
            str(k): _positive(_number(v, f"{path} [price_per_hour] {k}"), f"{path} [price_per_hour] {k}")
            for k, v in table.items()
        },
        str(doc.get("currency") or "USD"),
        str(path),
        str(given),
    )


def resolve(price_per_hour: float | None, cwd: Path | None = None) -> Prices | None:
    """The prices in force: --price-per-hour, else TBDKIT_PRICE_PER_HOUR, else the prices.toml that
    TBDKIT_PRICES names (or ./prices.toml); None when none is given (costs are then not shown)."""
    if price_per_hour is not None:
        return Prices({"*": _positive(price_per_hour, "--price-per-hour")}, "USD", "--price-per-hour", _now())
    env = os.environ.get(ENV_PRICE, "").strip()
    if env:
        return Prices({"*": _positive(env, ENV_PRICE)}, "USD", ENV_PRICE, _now())
    named = os.environ.get(ENV_PRICES, "").strip()
    if named:
        if not Path(named).is_file():
            raise UserError(f"{ENV_PRICES} names {named}, which is not a file: point it at your prices.toml.")
        return load_file(Path(named))
    here = (cwd or Path.cwd()) / PRICES_FILE
    return load_file(here) if here.is_file() else None


def price_of(prices: Prices, device: str) -> Price | None:
    if "*" in prices.by_device:
        return Price(prices.by_device["*"], prices.currency, prices.source, prices.given)
    return prices.for_device(device)


def costs(summary: Mapping[str, Any], price: Price | None) -> dict[str, dict[str, Any]]:
    """cost_per_million_samples and run_cost of one run's summary at `price` (value+unit+method, or
    null+reason)."""
    per_m_unit, run_unit = (f"{price.currency}/1M samples", price.currency) if price else ("", "")
    if price is None:
        why = "no price for this device in the prices given"
        return {
            "cost_per_million_samples": missing(per_m_unit, "price / sample throughput", why),
            "run_cost": missing(run_unit, "price x wall time", why),
        }
    rate = ((summary.get("metrics") or {}).get("sample_throughput") or {}).get("value")
    wall = summary.get("wall_s")
    per_m = (
        metric(
            price.per_hour / 3600.0 / rate * 1e6,
            per_m_unit,
            f"{price.text} / 3600 / sample throughput x 1e6",
            price_given=price.given,
        )
        if isinstance(rate, (int, float)) and rate > 0
        else missing(per_m_unit, "price / sample throughput", "the run has no sample throughput")
    )
    run = (
        metric(
            price.per_hour * float(wall) / 3600.0,
            run_unit,
            f"{price.text} x the run's wall time (setup, warm-up, window and analyses)",
            price_given=price.given,
        )
        if isinstance(wall, (int, float)) and wall > 0
        else missing(run_unit, "price x wall time", "the run's wall time is not recorded")
    )
    return {"cost_per_million_samples": per_m, "run_cost": run}
