"""When a rule fires: a count of new episodes (``every``, optionally ``or_after`` a
duration), cron times in a time zone, or a partition gone ``idle`` for a duration."""

from __future__ import annotations

import math
import re
import zoneinfo
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

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
    from croniter import croniter  # here: reading a store never checks a cron expression

    if not croniter.is_valid(expression):
        raise ValueError(f"invalid cron expression {expression!r}: {_cron_problem(expression)}")
    return expression


def _cron_problem(expression: str) -> str:
    """Why croniter refuses ``expression``: the field count, or the first bad field."""
    from croniter import croniter

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


DURATION_UNITS = (
    ("d", "days", 86400),
    ("h", "hours", 3600),
    ("m", "minutes", 60),
    ("s", "seconds", 1),
)
"""Units a duration is written in, largest first: (letter, long name, seconds)."""
MAX_DURATION = timedelta(days=36525)
"""Longest cadence duration: 100 years of 365.25 days (as the IR's ``Duration``)."""
DURATION_PATTERN = (
    "^" + "".join(rf"(?:([0-9]+(?:\.[0-9]+)?){u})?" for u, _, _ in DURATION_UNITS) + "$"
)
"""A duration as text: parts of a number and a unit, in the order d, h, m, s (``1h30m``)."""
_FORMS = "30m, 2h, 1d, 90s or 1h30m (or {minutes: 30})"


def duration_text(value: timedelta) -> str:
    """The canonical text of a duration: ``1h30m``, ``1d``, ``0.5s``."""
    left = round(value.total_seconds() * 1_000_000)
    parts = []
    for letter, _, seconds in DURATION_UNITS[:-1]:
        whole, left = divmod(left, seconds * 1_000_000)
        if whole:
            parts.append(f"{whole}{letter}")
    if left or not parts:
        parts.append(f"{left / 1_000_000:.6f}".rstrip("0").rstrip(".") + "s")
    return "".join(parts)


def duration_us(value: timedelta) -> int:
    """A duration in whole microseconds."""
    return round(value.total_seconds() * 1_000_000)


def parse_duration(value: Any) -> timedelta:
    """A cadence duration from YAML: text (``30m``, ``1h30m``) or parts (``{minutes: 30}``);
    ``ValueError`` unless it is positive and at most 100 years."""
    if isinstance(value, timedelta):
        return _bounded(value.total_seconds(), duration_text(value))
    if isinstance(value, str):
        return _bounded(_text_seconds(value), repr(value))
    if isinstance(value, dict):
        shown = "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
        return _bounded(_parts_seconds(value), shown)
    raise ValueError(f"expected a duration such as {_FORMS}, got {value!r}")


def _text_seconds(text: str) -> float:
    """The duration ``text`` writes (a leading ``-`` kept, to be refused as negative)."""
    body = text[1:] if text.startswith("-") else text
    found = re.match(DURATION_PATTERN, body)
    if not body or found is None:
        raise ValueError(
            f"invalid duration {text!r}: write a number and a unit per part, in the order "
            f"d, h, m, s, such as {_FORMS}"
        )
    seconds = sum(
        float(amount) * unit
        for amount, (_, _, unit) in zip(found.groups(), DURATION_UNITS, strict=True)
        if amount
    )
    return -seconds if body is not text else seconds


def _parts_seconds(parts: dict[Any, Any]) -> float:
    """The duration ``{days: 1, minutes: 30}`` writes (the IR's ``Duration`` parts)."""
    units = {name: seconds for _, name, seconds in DURATION_UNITS}
    total = 0.0
    for key, amount in parts.items():
        if key not in units:
            raise ValueError(
                f"unknown duration part {key!r} (use {', '.join(units)}, or text such as 1h30m)"
            )
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            raise ValueError(f"duration part {key!r}: expected a number, got {amount!r}")
        if not math.isfinite(amount):
            raise ValueError(f"duration part {key!r}: expected a finite number, got {amount!r}")
        if amount < 0:
            raise ValueError(f"duration part {key!r} is negative: a duration must be positive")
        total += amount * units[key]
    return total


def _bounded(seconds: float, shown: str) -> timedelta:
    """``seconds`` as a duration of whole microseconds, if positive and at most 100 years
    (checked before any conversion, so huge numbers cannot overflow)."""
    if seconds < 0:
        raise ValueError(f"duration {shown} is negative: a duration must be positive")
    if math.isnan(seconds) or seconds > MAX_DURATION.total_seconds():  # nan: inf - inf
        raise ValueError(f"duration {shown} is longer than 100 years")
    value = timedelta(microseconds=round(seconds * 1_000_000))
    if not value:
        raise ValueError(f"duration {shown} is zero: a duration must be positive")
    return value


CadenceDuration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(duration_text, return_type=str),
]
"""A positive duration of at most 100 years, written ``30m`` / ``1h30m`` or
``{minutes: 30}``, dumped as its canonical text."""
_KINDS = ("every", "cron", "idle")
_OPTIONAL = ("idle", "or_after")
"""Fields left out of dumps while unset, so packs without them keep their hash."""


class Cadence(FrozenModel):
    """When a rule fires: ``{every: N}`` (count-based), optionally ``or_after: DURATION``
    (whichever comes first), ``{cron: "...", tz: "..."}``, or ``{idle: DURATION}``."""

    every: int | None = Field(default=None, ge=1)
    cron: str | None = None
    tz: str = "UTC"
    idle: CadenceDuration | None = None
    """Fire once no episode arrived for this long after the partition's latest pending one."""
    or_after: CadenceDuration | None = None
    """With ``every``: also fire this long after the first pending episode."""

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, cron: str | None) -> str | None:
        """Checked on the field, so that the error points at the cron string."""
        return None if cron is None else check_cron(cron)

    @model_validator(mode="after")
    def _exactly_one(self) -> Cadence:
        given = [name for name in _KINDS if getattr(self, name) is not None]
        if self.or_after is not None and self.every is None:
            others = "".join(f", not with '{name}'" for name in given)
            raise ValueError(f"'or_after' goes with 'every' ({{every: N, or_after: 2h}}){others}")
        if not given:
            raise ValueError("cadence needs exactly one of 'every' (>= 1), 'cron' or 'idle'")
        if len(given) > 1:
            both = " and ".join(f"'{name}'" for name in given)
            raise ValueError(f"cadence needs exactly one of 'every', 'cron' or 'idle', not {both}")
        check_zone(self.tz)
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Unset trigger fields are left out: a pack that uses none keeps its hash."""
        out: dict[str, Any] = handler(self)
        for name in _OPTIONAL:
            if out.get(name) is None:
                out.pop(name, None)
        return out

    def as_dict(self) -> dict[str, Any]:
        """The cadence as the IR (and stargraph 0.8's ``ConsolidationRule.cadence``) writes
        it: ``{"every": 100}``, ``{"cron": "0 3 * * *"}``; ``tz`` only when not UTC."""
        return {
            name: value
            for name, value in self.model_dump(mode="json").items()
            if value is not None and not (name == "tz" and value == "UTC")
        }

    def __getitem__(self, key: str) -> Any:
        """``cadence["every"]``, as on stargraph 0.8's cadence dict (``KeyError`` if unset)."""
        return self.as_dict()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.as_dict()

    def get(self, key: str, default: Any = None) -> Any:
        """``cadence.get("cron")``, as on stargraph 0.8's cadence dict."""
        return self.as_dict().get(key, default)

    def keys(self) -> list[str]:
        return list(self.as_dict())

    def items(self) -> list[tuple[str, Any]]:
        return list(self.as_dict().items())

    def __eq__(self, other: object) -> bool:
        """Equal to another cadence with the same fields, or to the dict it writes."""
        if isinstance(other, Mapping):
            try:
                return self == Cadence.model_validate(dict(other))
            except ValueError:
                return False
        return super().__eq__(other)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.as_dict().items())))

    @property
    def kind(self) -> str:
        """``every``, ``or_after`` (every N or after a duration), ``cron`` or ``idle``."""
        if self.or_after is not None:
            return "or_after"
        return next(name for name in _KINDS if getattr(self, name) is not None)


def span_due_us(cadence: Cadence, first_us: int, last_us: int) -> int | None:
    """When a cadence judged on time becomes due, given its pending episodes' earliest and
    latest time (µs): ``idle`` after the latest, ``or_after`` after the earliest; else ``None``."""
    if cadence.idle is not None:
        return last_us + duration_us(cadence.idle)
    if cadence.or_after is not None:
        return first_us + duration_us(cadence.or_after)
    return None


def trigger_text(cadence: Cadence) -> str | None:
    """``every 3``, ``every 3 or after 1h`` or ``idle 30m`` (``None`` for a cron cadence)."""
    if cadence.idle is not None:
        return f"idle {duration_text(cadence.idle)}"
    if cadence.every is None:
        return None
    after = "" if cadence.or_after is None else f" or after {duration_text(cadence.or_after)}"
    return f"every {cadence.every}{after}"


SLEEP_CYCLE = Cadence.model_construct(cron="0 3 * * *")
"""The default cadence: a nightly batch at 03:00 UTC (made without validation, which would
import croniter for a constant every store module loads; tests compare it with the
validated value)."""
