"""Time: aware datetimes ↔ UTC microseconds, ISO-8601 literals, the range the stores keep.

Stored and compared times are integer microseconds since 1970-01-01T00:00:00Z. Every
conversion in the package goes through this module, so the arithmetic exists once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache
from typing import Final

from stargraph_mem.errors import StoreError

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
ONE_US: Final = timedelta(microseconds=1)
UTC_MIN: Final = datetime.min.replace(tzinfo=UTC)
UTC_MAX: Final = datetime.max.replace(tzinfo=UTC)
MIN_US: Final = (UTC_MIN - EPOCH) // ONE_US
"""The smallest UTC microsecond count a store keeps (0001-01-01T00:00:00Z)."""
MAX_US: Final = (UTC_MAX - EPOCH) // ONE_US
"""The largest UTC microsecond count a store keeps (9999-12-31T23:59:59.999999Z)."""
TIME_RANGE: Final = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z"


class TimestampRangeError(StoreError, ValueError):
    """A datetime whose UTC value the stores cannot keep and read back.

    Stored times are UTC microseconds that must convert back to a ``datetime``: the UTC
    value must lie within years 1 to 9999. ``0001-01-01T00:00:00+14:00`` is a valid
    ``datetime`` but its UTC value falls in year 0. Also a ``ValueError``, so pydantic
    validators report it as a validation error of the field.
    """


class NaiveTimestampError(ValueError):
    """An ISO-8601 text without a UTC offset (a naive time is refused, never guessed)."""


def time_range_error(what: str, value: object) -> TimestampRangeError:
    """The error for ``value`` (a datetime, or a stored microsecond count) out of range."""
    shown = value.isoformat() if isinstance(value, datetime) else repr(value)
    return TimestampRangeError(
        f"{what} {shown} is outside the range the store can keep: its UTC time must lie "
        f"within {TIME_RANGE}",
        what=what,
    )


def check_time_range(value: datetime, what: str) -> datetime:
    """Return ``value`` (aware) if its UTC value can be stored and read back, else raise
    :class:`TimestampRangeError` naming ``what`` and the value."""
    if 1 < value.year < 9999:  # a UTC offset is under a day: only the first and last years
        return value
    try:
        value.astimezone(UTC)
    except OverflowError as exc:
        raise time_range_error(what, value) from exc
    return value


def utc_now() -> datetime:
    """Wall-clock now, tz-aware UTC (never used inside rules: passes get ``now`` handed in)."""
    return datetime.now(UTC)


def to_utc(value: datetime, what: str = "time") -> datetime:
    """Return ``value`` in UTC; raise ``ValueError`` on naive datetimes and
    :class:`TimestampRangeError` (naming ``what``) when the UTC value is out of range."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("naive datetime: a timezone-aware datetime is required")
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:
        raise time_range_error(what, value) from exc


def to_us(value: datetime, what: str = "timestamp") -> int:
    """UTC microseconds since the epoch (exact integer arithmetic); naive values are refused,
    and so (:class:`TimestampRangeError`, naming ``what``) are values whose UTC time
    :func:`from_us` could not give back (outside years 1 to 9999)."""
    if value.utcoffset() is None:
        raise ValueError(f"{what} is a naive datetime: a timezone-aware datetime is required")
    us = (value - EPOCH) // ONE_US
    if not MIN_US <= us <= MAX_US:
        raise time_range_error(what, value)
    return us


def seconds_us(seconds: float) -> int:
    """A duration in seconds as whole microseconds (rounded): lease and claim lengths."""
    return round(seconds * 1_000_000)


@lru_cache(maxsize=256)
def _offset_tz(offset_s: int) -> timezone:
    """A fixed-offset zone (cached: episodes share a handful of offsets)."""
    return UTC if offset_s == 0 else timezone(timedelta(seconds=offset_s))


def from_us(ts_us: int, offset_s: int = 0) -> datetime:
    """Inverse of :func:`to_us`, expressed in the given UTC offset (seconds).

    A count no datetime has (in UTC, or once shifted by the offset) raises
    :class:`TimestampRangeError` (a ``ValueError``).
    """
    try:
        return (EPOCH + timedelta(microseconds=ts_us)).astimezone(_offset_tz(offset_s))
    except OverflowError as exc:
        what = "stored time" if offset_s == 0 else f"stored time (UTC offset {offset_s} s)"
        raise time_range_error(what, ts_us) from exc


def parse_iso(value: object) -> datetime:
    """An ISO-8601 text that carries a UTC offset, as an aware datetime.

    Raises ``ValueError`` for anything else, :class:`NaiveTimestampError` when only the
    offset is missing (callers word that case differently).
    """
    if not isinstance(value, str):
        raise ValueError("expected an ISO-8601 timestamp string with a UTC offset")
    if "\x00" in value:  # fromisoformat ignores a trailing NUL
        raise ValueError(f"invalid timestamp {value!r}: it holds a NUL character")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"invalid timestamp {value!r}") from exc
    if parsed.utcoffset() is None:
        raise NaiveTimestampError(f"naive timestamp {value!r}: add a UTC offset such as +00:00")
    return parsed


def with_utc(naive: str) -> str:
    """The naive ISO 8601 time ``naive`` written with a UTC offset, in a form
    :func:`parse_iso` accepts (for messages suggesting a fix): ``2026-11-01`` is
    ``2026-11-01T00:00:00+00:00`` (Python reads ``2026-11-01+00:00`` as a naive date)."""
    return datetime.fromisoformat(naive).replace(tzinfo=UTC).isoformat()


def iso_us(value: object) -> int:
    """An ISO-8601 literal with offset → UTC microseconds since the epoch.

    Exact for any year ``datetime`` can hold: a pack's literal is a comparison bound, not
    a stored time, so the stores' range does not apply.
    """
    return (parse_iso(value) - EPOCH) // ONE_US
