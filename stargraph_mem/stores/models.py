"""Typed models shared by the stores, the engine and the CLI (pydantic v2, strict shapes).

Naive datetimes are rejected everywhere (``AwareDatetime``); identifiers follow one
pattern so they can travel through CLIPS and SQL without quoting surprises.
"""

from __future__ import annotations

import hashlib
import math
import re
import zoneinfo
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Annotated, Any, Final, Literal

import orjson
from croniter import croniter
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)

from stargraph_mem.errors import StoreError

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""Episode ids, fact ids and rule ids all match this pattern."""

Identifier = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
ScopePart = Annotated[str, StringConstraints(min_length=1, max_length=256)]
Intent = Literal["add", "update", "delete", "noop"]
DeltaKind = Literal["add", "update", "delete", "noop"]

BindingScalar = str | bool | int | float | None
BindingValue = BindingScalar | list[BindingScalar]
"""What a rule binding holds: a JSON scalar or a list of them (validated without Python calls)."""

HONOURED_METADATA_KEYS = ("intent", "replaces", "subject", "predicate", "object")


def _no_nul(value: str, what: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters")
    return value


_SURROGATE: Final = re.compile("[\ud800-\udfff]")
"""A lone surrogate: a Python string may hold one, UTF-8 (SQLite, JSON) cannot."""


def unicode_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as UTF-8 text (a lone surrogate), or ``None``."""
    if value.isascii():
        return None
    found = _SURROGATE.search(value)
    if found is None:
        return None
    return (
        f"contains a lone surrogate {found.group()!r} at index {found.start()} "
        "(not valid Unicode text: it cannot be stored as UTF-8)"
    )


def _check_unicode(value: str, what: str) -> str:
    problem = unicode_problem(value)
    if problem is not None:
        raise ValueError(f"{what} {problem}")
    return value


_INT_RANGE = (-(2**63), 2**64 - 1)
"""Integers orjson stores exactly; beyond this range it would fail or silently go to float."""


def _check_storable(value: Any, where: str) -> None:
    """Reject JSON values that would not round-trip through orjson: NaN/inf, huge ints,
    strings (values or keys) holding lone surrogates."""
    if isinstance(value, str):
        # SQLite's JSON functions end a string at NUL: it would not read back the same
        _check_unicode(_no_nul(value, where), where)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} must be a finite number (got {value!r})")
    elif isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise ValueError(f"{where} is an integer outside the 64-bit range (got {value})")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                _check_unicode(_no_nul(key, f"{where}: key {key!r}"), f"{where}: key {key!r}")
            _check_storable(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_storable(item, f"{where}[{index}]")


def check_storable(value: Any, where: str) -> None:
    """Raise ``ValueError`` for JSON values orjson would not round-trip (NaN/inf, huge ints,
    lone surrogates in strings or keys)."""
    _check_storable(value, where)


# --- the time range the stores keep ---------------------------------------------------

UTC_MIN: Final = datetime.min.replace(tzinfo=UTC)
UTC_MAX: Final = datetime.max.replace(tzinfo=UTC)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
MIN_US: Final = (UTC_MIN - _EPOCH) // timedelta(microseconds=1)
"""The smallest UTC microsecond count a store keeps (0001-01-01T00:00:00Z)."""
MAX_US: Final = (UTC_MAX - _EPOCH) // timedelta(microseconds=1)
"""The largest UTC microsecond count a store keeps (9999-12-31T23:59:59.999999Z)."""
TIME_RANGE: Final = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z"


class TimestampRangeError(StoreError, ValueError):
    """A datetime whose UTC value the stores cannot keep and read back.

    Stored times are UTC microseconds that must convert back to a ``datetime``: the UTC
    value must lie within years 1 to 9999. ``0001-01-01T00:00:00+14:00`` is a valid
    ``datetime`` but its UTC value falls in year 0. Also a ``ValueError``, so pydantic
    validators report it as a validation error of the field.
    """


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


def _storable_time(value: datetime, info: ValidationInfo) -> datetime:
    return check_time_range(value, info.field_name or "datetime")


StoredDatetime = Annotated[AwareDatetime, AfterValidator(_storable_time)]
"""A timezone-aware datetime whose UTC value the stores can keep (years 1 to 9999 in UTC)."""


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes (sorted keys, UTC datetimes) used for hashing."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z)


def to_utc(value: datetime, what: str = "time") -> datetime:
    """Return ``value`` in UTC; raise ``ValueError`` on naive datetimes and
    :class:`TimestampRangeError` (naming ``what``) when the UTC value is out of range."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("naive datetime: a timezone-aware datetime is required")
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:
        raise time_range_error(what, value) from exc


def check_honoured_metadata(value: dict[str, Any]) -> None:
    """Raise ``ValueError`` when a key the default classification reads has the wrong shape
    (``intent``, ``replaces``, ``subject``, ``predicate``, ``object``)."""
    intent = value.get("intent")
    if intent is not None and intent not in ("add", "update", "delete", "noop"):
        raise ValueError(
            f"metadata.intent must be one of add, update, delete, noop (got {intent!r})"
        )
    replaces = value.get("replaces")
    if replaces is not None and not (
        isinstance(replaces, list) and all(isinstance(r, str) for r in replaces)
    ):
        raise ValueError("metadata.replaces must be a list of fact id strings")
    for key in ("subject", "predicate", "object"):
        item = value.get(key)
        if item is not None and not isinstance(item, str):
            raise ValueError(f"metadata.{key} must be a string")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


class Episode(_Model):
    """A raw event written with its full ``(user, session, agent)`` scope."""

    id: Identifier
    content: str
    timestamp: StoredDatetime
    source_node: str | None = None
    user: ScopePart
    session: ScopePart
    agent: ScopePart
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("content", "user", "session", "agent", "source_node")
    @classmethod
    def _check_text(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        return _check_unicode(_no_nul(value, "text fields"), info.field_name or "text")

    @field_validator("metadata")
    @classmethod
    def _check_metadata(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        check_honoured_metadata(value)
        _check_storable(value, "metadata")
        return value


class Cadence(_Model):
    """When a rule fires: ``{every: N}`` (count-based) or ``{cron: "...", tz: "..."}``."""

    every: int | None = Field(default=None, ge=1)
    cron: str | None = None
    tz: str = "UTC"

    @model_validator(mode="after")
    def _exactly_one(self) -> Cadence:
        if (self.every is None) == (self.cron is None):
            raise ValueError("cadence needs exactly one of 'every' (>= 1) or 'cron'")
        if self.cron is not None and not croniter.is_valid(self.cron):
            raise ValueError(f"invalid cron expression {self.cron!r}")
        try:
            zoneinfo.ZoneInfo(self.tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {self.tz!r}") from exc
        return self


SLEEP_CYCLE = Cadence(cron="0 3 * * *")
"""The default cadence: a nightly batch at 03:00 UTC."""


class ConsolidationRule(_Model):
    """The specification's rule contract: id, cadence, legacy SQL filter, emitted kinds."""

    id: Identifier
    cadence: Cadence = SLEEP_CYCLE
    when_filter: str | None = None
    then_emits: tuple[DeltaKind, ...] = ("add", "update", "delete", "noop")


# --- deltas -------------------------------------------------------------------------


def _finite_unit(value: float) -> float:
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError("confidence must be a finite number in [0, 1]")
    return value


class FactPayload(_Model):
    """The statement a fact makes: subject/predicate/object plus free-form payload."""

    subject: str = Field(min_length=1)
    predicate: str = Field(min_length=1)
    object: str
    payload: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_nul(self) -> FactPayload:
        # one check for the three fields: this runs for every delta a pass builds
        text = self.subject + self.predicate + self.object
        if "\x00" in text or not text.isascii():
            for name in ("subject", "predicate", "object"):
                _check_unicode(_no_nul(getattr(self, name), f"fact.{name}"), f"fact.{name}")
        return self


def delta_id_of(body: bytes) -> str:
    """The delta id for a delta's :meth:`~_DeltaBase.canonical_body`."""
    return "d" + hashlib.sha256(body).hexdigest()[:31]


class _DeltaBase(_Model):
    user: ScopePart
    agent: ScopePart
    source_episode_ids: list[Identifier] = Field(min_length=1)
    promotion_ts: StoredDatetime
    rule_id: Identifier
    confidence: float
    reason: str = ""
    bindings: dict[str, BindingValue] = Field(default_factory=dict)

    @field_validator("confidence")
    @classmethod
    def _check_confidence(cls, value: float) -> float:
        return _finite_unit(value)

    @field_validator("reason")
    @classmethod
    def _check_reason(cls, value: str) -> str:
        return _check_unicode(_no_nul(value, "reason"), "reason")

    def canonical_body(self) -> bytes:
        """Canonical JSON of the whole delta: what :attr:`delta_id` hashes (computed once)."""
        return self._canonical

    @cached_property
    def _canonical(self) -> bytes:
        # orjson's result keeps its whole output buffer (about 4 KiB); a pass holds tens of
        # thousands of these, so keep an exact-size copy
        return bytes(memoryview(canonical_json(self.model_dump(mode="json"))))

    @cached_property
    def delta_id(self) -> str:
        """Content-derived id: the same delta always has the same id (computed once)."""
        return delta_id_of(self._canonical)


class AddDelta(_DeltaBase):
    """Promote a new fact."""

    kind: Literal["add"] = "add"
    fact: FactPayload

    @property
    def new_fact_id(self) -> str:
        """The id the fact created by this delta gets."""
        return "f" + self.delta_id[1:]


class UpdateDelta(_DeltaBase):
    """Supersede the facts in ``replaces`` and assert a new one."""

    kind: Literal["update"] = "update"
    replaces: list[Identifier] = Field(min_length=1)
    fact: FactPayload

    @property
    def new_fact_id(self) -> str:
        """The id the fact created by this delta gets."""
        return "f" + self.delta_id[1:]


class DeleteDelta(_DeltaBase):
    """Close the facts in ``replaces``; nothing is physically deleted."""

    kind: Literal["delete"] = "delete"
    replaces: list[Identifier] = Field(min_length=1)


class NoopDelta(_DeltaBase):
    """Audit only; ``reinforces`` names facts the episode confirmed."""

    kind: Literal["noop"] = "noop"
    reinforces: list[Identifier] = Field(default_factory=list)


MemoryDelta = Annotated[
    AddDelta | UpdateDelta | DeleteDelta | NoopDelta, Field(discriminator="kind")
]
DELTA_ADAPTER: TypeAdapter[AddDelta | UpdateDelta | DeleteDelta | NoopDelta] = TypeAdapter(
    MemoryDelta
)
DELTA_LIST_ADAPTER: TypeAdapter[list[AddDelta | UpdateDelta | DeleteDelta | NoopDelta]] = (
    TypeAdapter(list[MemoryDelta])
)


# --- facts ----------------------------------------------------------------------------


class Fact(_Model):
    """A promoted statement scoped ``(user, agent)``, with its validity interval."""

    id: Identifier
    user: str
    agent: str
    subject: str
    predicate: str
    object: str
    payload: dict[str, JsonValue] = Field(default_factory=dict)
    confidence: float
    valid_from: StoredDatetime
    valid_until: StoredDatetime | None = None
    superseded_by: str | None = None
    recorded_at: StoredDatetime
    rule_id: str
    delta_id: str

    @property
    def is_current(self) -> bool:
        return self.valid_until is None


class FactPattern(_Model):
    """A query over facts; ``None`` fields match anything. Current facts only by default."""

    user: ScopePart | None = None
    agent: ScopePart | None = None
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    min_confidence: float | None = None
    include_history: bool = False
    limit: int | None = Field(default=None, ge=1)


# --- health / migrations -------------------------------------------------------------------


class StoreHealth(_Model):
    """Real figures read from the database; ``ok=False`` with ``reason`` on failure."""

    ok: bool
    reason: str | None = None
    path: str
    schema_version: int | None = None
    journal_mode: str | None = None
    quick_check: str | None = None
    file_size: int | None = None
    episode_count: int | None = None
    fact_count: int | None = None


class MigrationOp(_Model):
    """One schema change. Only nullable ``add_column`` is supported."""

    op: str
    table: str
    column: str
    type: str = "TEXT"
    nullable: bool = True


class MigrationPlan(_Model):
    """An ordered list of schema operations applied in one transaction."""

    name: str = Field(min_length=1)
    operations: list[MigrationOp] = Field(min_length=1)


def utc_now() -> datetime:
    """Wall-clock now, tz-aware UTC (never used inside rules: passes get ``now`` handed in)."""
    return datetime.now(UTC)
