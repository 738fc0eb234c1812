"""Time bounds of a recall: ``after`` and ``before`` as the caller writes them, read into UTC.

A window is half-open: a timestamp ``t`` is inside when ``after <= t < before`` (either
bound may be missing). Accepted forms, for either bound:

* ``None``: no bound;
* ``"last_week"`` / ``"last_month"``: ``now`` minus 7 / 30 days (rolling windows, the same
  instant for ``after`` and ``before``);
* ``"today"`` / ``"yesterday"``: that UTC day, as a ``YYYY-MM-DD`` of it would be;
* ``"YYYY-MM-DD"`` (or a ``datetime.date``): a UTC day. ``after`` starts at its midnight,
  ``before`` ends at the next midnight, so ``after=D, before=D`` is the whole of day D;
* an ISO 8601 datetime with a UTC offset (``2024-05-01T09:30:00+02:00``, ``…Z``), or a
  timezone-aware ``datetime``: that instant.

Naive datetimes (with no offset) are refused, never guessed, and so is any other text:
the :class:`~stargraph_mem.errors.RecallError` names the parameter and the accepted forms.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Final

from pydantic import AwareDatetime

from stargraph_mem.errors import RecallError
from stargraph_mem.model.base import FrozenModel
from stargraph_mem.model.time import UTC_MAX, TimestampRangeError, to_utc

__all__ = [
    "ACCEPTED_FORMS",
    "RELATIVE_DAYS",
    "TimeWindow",
    "parse_time_bound",
    "parse_time_window",
]

RELATIVE_DAYS: Final = {"last_week": 7, "last_month": 30}
"""Rolling windows: the bound is ``now`` minus this many days."""

ACCEPTED_FORMS: Final = (
    "'today', 'yesterday', 'last_week', 'last_month', 'YYYY-MM-DD' (a UTC day), "
    "an ISO 8601 datetime with a UTC offset (2024-05-01T09:30:00+02:00 or …Z); "
    "from Python also a timezone-aware datetime, or None (open)"
)

_DAY: Final = re.compile(r"\d{4}-\d{2}-\d{2}")


def _refuse(parameter: str, value: object, why: str) -> RecallError:
    return RecallError(
        f"{parameter}: {why}; accepted: {ACCEPTED_FORMS}", parameter=parameter, value=value
    )


def _day_bound(day: date, *, end: bool) -> datetime:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    if not end:
        return start
    if day == date.max:
        return UTC_MAX  # the last representable instant: the day's final microsecond is lost
    return start + timedelta(days=1)


def parse_time_bound(
    value: str | date | datetime | None,
    *,
    now: datetime,
    end: bool,
    parameter: str | None = None,
) -> datetime | None:
    """``value`` as a UTC instant (``None`` stays ``None``): a window's start when ``end``
    is false (``after``), its exclusive end when true (``before``). ``parameter`` names the
    argument in errors (default ``before`` when ``end``, else ``after``)."""
    name = parameter if parameter is not None else ("before" if end else "after")
    if value is None:
        return None
    if not isinstance(now, datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise RecallError(
            f"now: a timezone-aware datetime is required, got {now!r}", parameter="now", value=now
        )
    try:
        now = to_utc(now, "now")
    except TimestampRangeError as exc:
        raise RecallError(str(exc), parameter="now", value=now) from exc
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise _refuse(name, value, f"naive datetime {value.isoformat()} (no UTC offset)")
        try:
            return to_utc(value, name)
        except TimestampRangeError as exc:
            raise _refuse(name, value, str(exc)) from exc
    if isinstance(value, date):
        return _day_bound(value, end=end)
    if not isinstance(value, str):
        raise _refuse(name, value, f"expected text or a datetime, got {type(value).__name__}")
    text = value.strip()
    if text in RELATIVE_DAYS:
        try:
            return now - timedelta(days=RELATIVE_DAYS[text])
        except OverflowError as exc:
            raise _refuse(name, value, f"{text!r} falls before year 1 for now={now}") from exc
    if text in ("today", "yesterday"):
        day = now.date()
        if text == "yesterday":
            if day == date.min:
                raise _refuse(name, value, f"'yesterday' falls before year 1 for now={now}")
            day -= timedelta(days=1)
        return _day_bound(day, end=end)
    if _DAY.fullmatch(text):
        try:
            day = date.fromisoformat(text)
        except ValueError as exc:
            raise _refuse(name, value, f"{text!r} is not a calendar day ({exc})") from exc
        return _day_bound(day, end=end)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise _refuse(name, value, f"{value!r} is not a time bound") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise _refuse(name, value, f"{value!r} has no UTC offset (a naive time is refused)")
    try:
        return to_utc(parsed, name)
    except TimestampRangeError as exc:
        raise _refuse(name, value, str(exc)) from exc


def _given(value: str | date | datetime | None) -> str:
    """A bound as it was given, for a message (a date or datetime in ISO 8601)."""
    return repr(value.isoformat()) if isinstance(value, date) else repr(value)


class TimeWindow(FrozenModel):
    """A half-open UTC window: ``after <= t < before``; a missing bound is open."""

    after: AwareDatetime | None = None
    before: AwareDatetime | None = None

    def contains(self, moment: datetime) -> bool:
        """Whether the aware ``moment`` lies in the window."""
        moment = to_utc(moment)
        if self.after is not None and moment < self.after:
            return False
        return self.before is None or moment < self.before

    @property
    def is_open(self) -> bool:
        """No bound at all."""
        return self.after is None and self.before is None


def parse_time_window(
    after: str | date | datetime | None,
    before: str | date | datetime | None,
    *,
    now: datetime,
) -> TimeWindow:
    """Both bounds read by :func:`parse_time_bound`; a window whose ``after`` is not earlier
    than its ``before`` (which could hold nothing) is refused."""
    start = parse_time_bound(after, now=now, end=False, parameter="after")
    stop = parse_time_bound(before, now=now, end=True, parameter="before")
    if start is not None and stop is not None and start >= stop:
        raise RecallError(
            f"after {_given(after)} (from {start.isoformat()}) is not earlier than before "
            f"{_given(before)} (until {stop.isoformat()}, left out): the window would hold "
            "nothing",
            parameter="after",
            value=(after, before),
        )
    return TimeWindow(after=start, before=stop)
