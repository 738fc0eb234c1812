"""When a rule fires: a count of new episodes (``every``) or cron times in a time zone."""

from __future__ import annotations

import zoneinfo

from croniter import croniter
from pydantic import Field, field_validator, model_validator

from stargraph_mem.model.base import FrozenModel

_CRON_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    (
        "month",
        1,
        12,
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    ),
    ("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
    ("second", 0, 59, ()),
    ("year", 1970, 2099, ()),
)
"""Fields croniter reads, in order (seconds and year are optional), with their ranges."""
_CRON_SHORTCUTS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


def check_cron(expression: str) -> str:
    """``expression``, if croniter accepts it as a cron expression (else ``ValueError``
    naming the field at fault and what it allows)."""
    if not croniter.is_valid(expression):
        raise ValueError(f"invalid cron expression {expression!r}: {_cron_problem(expression)}")
    return expression


def _cron_problem(expression: str) -> str:
    """Why croniter refuses ``expression``: the field count, or the first bad field."""
    parts = expression.split()
    if parts and parts[0].startswith("@"):
        return f"unknown shortcut {parts[0]!r} (use {', '.join(_CRON_SHORTCUTS)})"
    if len(parts) not in (5, 6, 7):
        return (
            f"expected 5 fields (minute hour day-of-month month day-of-week), "
            f"optionally seconds and a year, got {len(parts)}"
        )
    for index, text in enumerate(parts):
        alone = ["*"] * len(parts)
        alone[index] = text
        if not croniter.is_valid(" ".join(alone)):
            return _cron_field_problem(index, text)
    return "its fields do not make a schedule"


def _cron_field_problem(index: int, text: str) -> str:
    """What is wrong with one field: a value out of range, an unknown name, a bad step."""
    name, low, high, names = _CRON_FIELDS[index]
    where = f"{name} field {text!r}"
    allowed = f"{low}-{high}" + (f" or {names[0]}-{names[-1]}" if names else "")
    rest = f"(use {allowed})"
    for item in text.split(","):
        base, slash, step = item.partition("/")
        if slash and not (step.isdigit() and int(step) >= 1):
            return f"{where}: step {step!r} must be a whole number of at least 1"
        for end in [] if base in ("*", "?") else base.split("-"):
            if end.isdigit() and not low <= int(end) <= high:
                return f"{where}: {end} is out of range {low}-{high}"
            if end.isalpha() and end.lower() not in names:
                return f"{where}: unknown name {end!r} {rest}"
            if not end:
                return f"{where}: a value is missing {rest}"
    return f"{where} is not valid {rest}"


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

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, cron: str | None) -> str | None:
        """Checked on the field, so that the error points at the cron string."""
        return None if cron is None else check_cron(cron)

    @model_validator(mode="after")
    def _exactly_one(self) -> Cadence:
        if (self.every is None) == (self.cron is None):
            raise ValueError("cadence needs exactly one of 'every' (>= 1) or 'cron'")
        check_zone(self.tz)
        return self


SLEEP_CYCLE = Cadence(cron="0 3 * * *")
"""The default cadence: a nightly batch at 03:00 UTC."""
