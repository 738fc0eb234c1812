"""When a rule fires: a count of new episodes (``every``) or cron times in a time zone."""

from __future__ import annotations

import zoneinfo

from croniter import croniter
from pydantic import Field, model_validator

from stargraph_mem.model.base import FrozenModel


def check_cron(expression: str) -> str:
    """``expression``, if croniter accepts it as a cron expression (else ``ValueError``)."""
    if not croniter.is_valid(expression):
        raise ValueError(f"invalid cron expression {expression!r}")
    return expression


def check_zone(name: str) -> str:
    """``name``, if it names an IANA time zone (else ``ValueError``)."""
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc
    return name


class Cadence(FrozenModel):
    """When a rule fires: ``{every: N}`` (count-based) or ``{cron: "...", tz: "..."}``."""

    every: int | None = Field(default=None, ge=1)
    cron: str | None = None
    tz: str = "UTC"

    @model_validator(mode="after")
    def _exactly_one(self) -> Cadence:
        if (self.every is None) == (self.cron is None):
            raise ValueError("cadence needs exactly one of 'every' (>= 1) or 'cron'")
        if self.cron is not None:
            check_cron(self.cron)
        check_zone(self.tz)
        return self


SLEEP_CYCLE = Cadence(cron="0 3 * * *")
"""The default cadence: a nightly batch at 03:00 UTC."""
