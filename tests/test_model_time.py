"""The time module every layer converts through: µs ↔ datetimes, ISO literals, the range."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from stargraph_mem.model.time import (
    MAX_US,
    MIN_US,
    NaiveTimestampError,
    TimestampRangeError,
    from_us,
    iso_us,
    parse_iso,
    seconds_us,
    to_us,
    to_utc,
)

PLUS_TWO = timezone(timedelta(hours=2))


def test_microseconds_round_trip_in_the_stored_offset() -> None:
    when = datetime(2026, 11, 23, 14, 30, 0, 123456, tzinfo=PLUS_TWO)
    us = to_us(when)
    assert us == to_us(when.astimezone(UTC))
    assert from_us(us, 7200) == when and from_us(us, 7200).utcoffset() == timedelta(hours=2)
    assert from_us(MIN_US) == datetime.min.replace(tzinfo=UTC)
    assert from_us(MAX_US) == datetime.max.replace(tzinfo=UTC)


def test_out_of_range_and_naive_values_are_refused() -> None:
    with pytest.raises(TimestampRangeError, match="valid_from 0001-01-01T00:00:00\\+14:00"):
        to_us(datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), "valid_from")
    with pytest.raises(TimestampRangeError, match="stored time"):
        from_us(MAX_US + 1)
    with pytest.raises(ValueError, match="clock\\(\\) is a naive datetime"):
        to_us(datetime(2026, 1, 1), "clock()")
    with pytest.raises(ValueError, match="naive datetime"):
        to_utc(datetime(2026, 1, 1))


def test_iso_literals_need_an_offset() -> None:
    assert parse_iso("2026-11-23T12:00:00+02:00") == datetime(2026, 11, 23, 10, tzinfo=UTC)
    with pytest.raises(NaiveTimestampError, match="add a UTC offset"):
        parse_iso("2026-11-23T12:00:00")
    with pytest.raises(ValueError, match="invalid timestamp 'soon'"):
        parse_iso("soon")
    with pytest.raises(ValueError, match="expected an ISO-8601 timestamp string"):
        parse_iso(20261123)


def test_iso_literals_convert_exactly_in_any_year() -> None:
    literal = "2246-04-17T04:10:26.878264+00:00"
    assert iso_us(literal) == to_us(datetime.fromisoformat(literal))
    assert iso_us("0001-01-01T00:00:00+14:00") == MIN_US - 14 * 3600 * 1_000_000


def test_durations_round_to_whole_microseconds() -> None:
    assert seconds_us(60.0) == 60_000_000
    assert seconds_us(2.5) == 2_500_000
    assert seconds_us(1e-7) == 0


def test_a_time_holding_a_nul_is_refused_and_a_suggested_offset_parses() -> None:
    from stargraph_mem.model.time import parse_iso, with_utc

    with pytest.raises(ValueError, match="NUL"):
        parse_iso("2026-11-01T00:00:00+00:00\x00")  # fromisoformat drops a trailing NUL
    for naive in ("2026-11-01", "2026-11-01T09:30", "2026-11-01 09:30:15.5"):
        assert parse_iso(with_utc(naive)).utcoffset() == timedelta(0)
    assert with_utc("2026-11-01") == "2026-11-01T00:00:00+00:00"
