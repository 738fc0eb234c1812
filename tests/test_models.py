"""Model validation: delta provenance, the delta union's JSON round-trip, cadences, episodes."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from stargraph_mem.stores.models import (
    DELTA_ADAPTER,
    AddDelta,
    Cadence,
    DeleteDelta,
    Episode,
    NoopDelta,
    UpdateDelta,
)

PROVENANCE: dict[str, Any] = {
    "user": "alice",
    "agent": "a1",
    "source_episode_ids": ["e1", "e2"],
    "promotion_ts": "2026-11-22T12:00:00+01:00",
    "rule_id": "default.add",
    "confidence": 0.75,
}
FACT = {"subject": "alice", "predicate": "likes", "object": "tea", "payload": {"n": [1, "é"]}}
VALID: dict[str, dict[str, Any]] = {
    "add": {**PROVENANCE, "kind": "add", "fact": FACT},
    "update": {**PROVENANCE, "kind": "update", "replaces": ["f1"], "fact": FACT},
    "delete": {**PROVENANCE, "kind": "delete", "replaces": ["f1", "f2"]},
    "noop": {**PROVENANCE, "kind": "noop", "reinforces": ["f1"], "reason": "seen again"},
}
CLASSES = {"add": AddDelta, "update": UpdateDelta, "delete": DeleteDelta, "noop": NoopDelta}
MISSING = object()

BAD_PROVENANCE: list[tuple[str, object]] = [
    ("source_episode_ids", MISSING),
    ("source_episode_ids", []),
    ("source_episode_ids", [""]),
    ("source_episode_ids", ["not an id"]),
    ("source_episode_ids", None),
    ("promotion_ts", MISSING),
    ("promotion_ts", "2026-11-22T12:00:00"),
    ("promotion_ts", datetime(2026, 11, 22, 12, 0)),
    ("promotion_ts", "yesterday"),
    ("rule_id", MISSING),
    ("rule_id", ""),
    ("rule_id", "has space"),
    ("confidence", MISSING),
    ("confidence", math.nan),
    ("confidence", math.inf),
    ("confidence", -math.inf),
    ("confidence", -0.01),
    ("confidence", 1.01),
    ("confidence", "high"),
]
BAD_REPLACES: list[object] = [MISSING, [], [""], ["bad id"], None]


def with_field(kind: str, field: str, value: object) -> dict[str, Any]:
    """A valid delta of ``kind`` with ``field`` replaced (or removed for MISSING)."""
    data = {k: v for k, v in VALID[kind].items() if k != field}
    if value is not MISSING:
        data[field] = value
    return data


def assert_rejected_naming(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        DELTA_ADAPTER.validate_python(data)
    assert field in str(caught.value)
    assert any(field in error["loc"] for error in caught.value.errors())


@pytest.mark.parametrize("kind", list(VALID))
@pytest.mark.parametrize(("field", "value"), BAD_PROVENANCE)
def test_provenance_fields_are_mandatory_and_checked(kind: str, field: str, value: object) -> None:
    assert_rejected_naming(with_field(kind, field, value), field)


@pytest.mark.parametrize("kind", ["update", "delete"])
@pytest.mark.parametrize("value", BAD_REPLACES)
def test_replaces_is_required_on_update_and_delete(kind: str, value: object) -> None:
    assert_rejected_naming(with_field(kind, "replaces", value), "replaces")


@pytest.mark.parametrize(("kind", "field"), [("add", "replaces"), ("noop", "fact")])
def test_fields_of_other_kinds_are_refused(kind: str, field: str) -> None:
    assert_rejected_naming({**VALID[kind], field: VALID["update"][field]}, field)


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValidationError, match="kind"):
        DELTA_ADAPTER.validate_python({**VALID["add"], "kind": "merge"})


@pytest.mark.parametrize("kind", list(VALID))
def test_each_kind_round_trips_through_json(kind: str) -> None:
    delta = DELTA_ADAPTER.validate_python(VALID[kind])
    assert type(delta) is CLASSES[kind]
    text = DELTA_ADAPTER.dump_json(delta)
    back = DELTA_ADAPTER.validate_json(text)
    assert type(back) is CLASSES[kind]
    assert back == delta
    assert back.delta_id == delta.delta_id
    assert back.promotion_ts == datetime(2026, 11, 22, 11, 0, tzinfo=UTC)


def test_delta_id_depends_on_content() -> None:
    one = DELTA_ADAPTER.validate_python(VALID["add"])
    other = DELTA_ADAPTER.validate_python({**VALID["add"], "confidence": 0.5})
    assert one.delta_id != other.delta_id
    assert isinstance(one, AddDelta)
    assert one.new_fact_id == "f" + one.delta_id[1:]


# --- cadence ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "exactly one"),
        ({"every": 3, "cron": "0 3 * * *"}, "exactly one"),
        ({"every": 0}, "every"),
        ({"every": -2}, "every"),
        ({"cron": "61 * * * *"}, "invalid cron expression"),
        ({"cron": "every night"}, "invalid cron expression"),
        ({"cron": "0 3 * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"every": 1, "when": "now"}, "when"),
    ],
)
def test_bad_cadences_are_rejected(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Cadence.model_validate(data)


@pytest.mark.parametrize(
    ("cron", "reason"),
    [
        ("61 * * * *", "minute field '61': 61 is out of range 0-59"),
        ("0 24 * * *", "hour field '24': 24 is out of range 0-23"),
        ("0 3 0 * *", "day-of-month field '0': 0 is out of range 1-31"),
        ("0 3 1 1-13 *", "month field '1-13': 13 is out of range 1-12"),
        ("0 3 * * 8", "day-of-week field '8': 8 is out of range 0-7"),
        ("0 3 * * 1,9", "day-of-week field '1,9': 9 is out of range 0-7"),
        ("0 3 * foo *", "month field 'foo': unknown name 'foo' (use 1-12 or jan-dec)"),
        ("0 3 * * mon-fry", "day-of-week field 'mon-fry': unknown name 'fry' (use 0-7 or sun-sat)"),
        ("*/0 3 * * *", "minute field '*/0': step '0' must be a whole number of at least 1"),
        ("1,,2 3 * * *", "minute field '1,,2': a value is missing (use 0-59)"),
        ("0 3 * * 5#9", "day-of-week field '5#9' is not valid (use 0-7 or sun-sat)"),
        ("0 3 * * * 0 1969", "year field '1969': 1969 is out of range 1970-2099"),
        (
            "every night",
            "expected 5 fields (minute hour day-of-month month day-of-week), optionally "
            "seconds and a year, got 2",
        ),
        (
            "@nightly",
            "unknown shortcut '@nightly' (use @yearly, @annually, @monthly, @weekly, @daily, "
            "@midnight, @hourly)",
        ),
    ],
)
def test_an_invalid_cron_says_why(cron: str, reason: str) -> None:
    with pytest.raises(ValidationError) as info:
        Cadence(cron=cron)
    (error,) = info.value.errors()
    assert error["loc"] == ("cron",)
    assert error["msg"] == f"Value error, invalid cron expression {cron!r}: {reason}"


@pytest.mark.parametrize(
    "data", [{"every": 1}, {"every": 500}, {"cron": "0 3 * * *", "tz": "Europe/Paris"}]
)
def test_good_cadences_are_accepted(data: dict[str, Any]) -> None:
    assert Cadence.model_validate(data).model_dump(exclude_defaults=True) == data


# --- episodes ------------------------------------------------------------------------------

EPISODE: dict[str, Any] = {
    "id": "e1",
    "content": "hello",
    "timestamp": "2026-11-22T12:00:00+00:00",
    "user": "alice",
    "session": "s1",
    "agent": "a1",
}


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"intent": 3}, "metadata.intent must be a string"),
        ({"replaces": "f1"}, "metadata.replaces"),
        ({"replaces": ["f1", 2]}, "metadata.replaces"),
        ({"subject": 3}, "metadata.subject"),
        ({"object": ["x"]}, "metadata.object"),
        ({"score": math.nan}, "metadata.score must be a finite number"),
        ({"deep": {"list": [1, math.inf]}}, r"metadata.deep.list\[1\] must be a finite number"),
        ({"n": 2**64}, "metadata.n is an integer outside the 64-bit range"),
        ({"n": -(2**63) - 1}, "outside the 64-bit range"),
    ],
)
def test_episode_metadata_checks(metadata: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Episode.model_validate({**EPISODE, "metadata": metadata})


def test_an_unknown_intent_string_is_kept() -> None:
    episode = Episode.model_validate({**EPISODE, "metadata": {"intent": "merge"}})
    assert episode.metadata["intent"] == "merge"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timestamp", "2026-11-22T12:00:00"),
        ("id", "bad id"),
        ("user", ""),
        ("content", "nul\x00byte"),
        ("source_node", "n\x00"),
        ("extra", 1),
    ],
)
def test_episode_field_checks(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        Episode.model_validate({**EPISODE, field: value})
    assert field in str(caught.value)


def test_episode_accepts_edge_metadata() -> None:
    metadata = {"intent": "update", "replaces": ["f1"], "max": 2**64 - 1, "min": -(2**63)}
    episode = Episode.model_validate({**EPISODE, "metadata": metadata})
    assert episode.metadata == metadata
