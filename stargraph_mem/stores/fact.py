"""The fact store contract: provenance bundles, the adapter that checks them, result models.

Every promoted fact carries a :class:`ProvenanceBundle` (rule, pack hash, delta, source
episodes, promotion time, confidence, reason, bindings, predecessors). The
:class:`ProvenanceAdapter` sanitises bundles and stages ``(fact, bundle)`` pairs; a store
writes the staged pairs inside the transaction that applies the batch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from stargraph_mem.errors import DeltaValidationError, MemoryScopeError
from stargraph_mem.model.base import (
    ID_PATTERN,
    Identifier,
    StoredDatetime,
    check_storable,
    unicode_problem,
)
from stargraph_mem.model.deltas import DELTA_BY_KIND, Delta, MemoryDelta
from stargraph_mem.model.facts import Fact, FactPattern, StatusEvent
from stargraph_mem.model.layers import DEFAULT_LAYER, DEFAULT_MEMORY_TYPE
from stargraph_mem.model.time import TIME_RANGE, from_us
from stargraph_mem.stores.models import MigrationPlan, StoreHealth
from stargraph_mem.stores.scope import Partition, partition_key

__all__ = [
    "MAX_REASON_CHARS",
    "ApplyResult",
    "AuditRow",
    "DeltaInput",
    "EngineFact",
    "Explanation",
    "FactListener",
    "FactStore",
    "FathomAdapter",
    "ProvenanceAdapter",
    "ProvenanceBundle",
    "Rejection",
    "SourceEpisode",
    "WatermarkAdvance",
    "check_pack_hash",
    "sanitize_bundle",
    "sanitize_fact",
    "trusted",
]

MAX_REASON_CHARS: Final = 2000
"""Longer reasons are cut to this many characters (ending in ``…``) in the lineage."""
MAX_PACK_HASH_CHARS: Final = 256
_ID: Final = re.compile(ID_PATTERN)
_ID_BODY: Final = ID_PATTERN.removeprefix("^").removesuffix("$")
_IDS: Final = re.compile(f"{_ID_BODY}(?:\n{_ID_BODY})*")
"""Newline-joined identifiers (the id pattern has no newline): one match checks them all."""
_ZERO: Final = timedelta(0)
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
"""The integers orjson stores exactly (the range models.check_storable allows)."""

Scalar = str | int | float | bool | None
BindingValue = Scalar | list[Scalar]
DeltaInput = Delta | Mapping[str, Any]
"""What ``apply_deltas`` accepts: validated delta models or plain dicts."""


_M = TypeVar("_M", bound=BaseModel)


def trusted(cls: type[_M], values: dict[str, Any]) -> _M:
    """``cls.model_construct(**values)`` for a complete dict of already-validated values.

    Skips model_construct's per-field alias and default bookkeeping: the batch path
    builds two models per added fact, and their values come from a validated delta.
    """
    model = cls.__new__(cls)
    object.__setattr__(model, "__dict__", values)
    object.__setattr__(model, "__pydantic_fields_set__", set(values))
    object.__setattr__(model, "__pydantic_extra__", None)
    object.__setattr__(model, "__pydantic_private__", None)
    return model


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _checked_partition(value: Partition) -> Partition:
    """A partition whose key can be built (non-empty, NUL-free components)."""
    try:
        partition_key(value.user, value.agent)
    except MemoryScopeError as exc:
        raise ValueError(exc.message) from exc
    return value


class ProvenanceBundle(_Frozen):
    """Why a fact exists: the rule, pack and delta that made it, from which episodes, when."""

    rule_id: str
    pack_hash: str = ""
    delta_id: str
    source_episode_ids: tuple[str, ...]
    promotion_ts: StoredDatetime
    confidence: float
    reason: str = ""
    bindings: dict[str, BindingValue] = Field(default_factory=dict)
    predecessor_ids: tuple[str, ...] = ()


# --- sanitising ---------------------------------------------------------------------------


def _invalid(field: str, problem: str) -> DeltaValidationError:
    return DeltaValidationError(f"{field}: {problem}", field=field)


def _text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise _invalid(field, f"expected a string, got {type(value).__name__}")
    if "\x00" in value:
        raise _invalid(field, "must not contain NUL characters")
    problem = unicode_problem(value)
    if problem is not None:
        raise _invalid(field, problem)
    return value


def _clean_text(joined: str) -> bool:
    """True when ``joined`` (several texts joined) has no NUL and no lone surrogate."""
    return "\x00" not in joined and (joined.isascii() or unicode_problem(joined) is None)


def _identifier(value: object, field: str) -> str:
    if not isinstance(value, str) or _ID.fullmatch(value) is None:
        raise _invalid(field, f"{value!r} does not match the id pattern {ID_PATTERN}")
    return value


def _identifiers(values: Sequence[object], field: str) -> None:
    for index, value in enumerate(values):
        if not isinstance(value, str) or _ID.fullmatch(value) is None:
            _identifier(value, f"{field}[{index}]")


def _texts(owner: object, names: Sequence[str], prefix: str) -> None:
    """Every named attribute is a NUL-free string (one join on the fast path)."""
    try:
        clean = _clean_text("".join([getattr(owner, name) for name in names]))
    except TypeError:
        clean = False
    if not clean:
        for name in names:
            _text(getattr(owner, name), prefix + name)


def _utc(value: object, field: str) -> datetime:
    if not isinstance(value, datetime):
        raise _invalid(field, f"expected a datetime, got {type(value).__name__}")
    if value.tzinfo is UTC:
        return value
    offset = value.utcoffset()
    if offset is None:
        raise _invalid(field, "naive datetime: a timezone-aware datetime is required")
    # a zero offset under another tzinfo object (e.g. parsed from JSON) is UTC already
    if offset == _ZERO:
        return value
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:
        problem = f"{value.isoformat()} is outside the range the store can keep: its UTC time "
        raise _invalid(field, problem + f"must lie within {TIME_RANGE}") from exc


aware_utc = _utc
"""``value`` as a UTC datetime, or :class:`DeltaValidationError` naming ``field``."""


def _unit(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid(field, f"expected a number, got {type(value).__name__}")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise _invalid(field, f"must be a finite number in [0, 1] (got {value!r})")
    return float(value)


def _scalar(value: object, field: str) -> Scalar:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _text(value, field)
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise _invalid(field, "integer outside the range JSON storage keeps exactly")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _invalid(field, f"must be a finite number (got {value!r})")
        return value
    raise _invalid(field, f"expected a JSON scalar, got {type(value).__name__}")


def _bindings(values: Mapping[str, object]) -> None:
    try:  # the common case: string keys and values, one NUL scan (join refuses non-str)
        if _clean_text("".join([*values, *values.values()])):  # type: ignore[list-item]
            return
    except TypeError:
        pass
    for key, value in values.items():
        _text(key, "bindings")
        if isinstance(value, list | tuple):
            for index, item in enumerate(value):
                _scalar(item, f"bindings.{key}[{index}]")
        else:
            _scalar(value, f"bindings.{key}")


def _reason(value: object) -> str:
    text = _text(value, "reason")
    if len(text) > MAX_REASON_CHARS:
        return text[: MAX_REASON_CHARS - 1] + "…"
    return text


def check_pack_hash(value: object) -> str:
    """A NUL-free pack hash of at most ``MAX_PACK_HASH_CHARS`` characters."""
    if type(value) is str and value in _GOOD_HASHES:
        return value
    text = _text(value, "pack_hash")
    if len(text) > MAX_PACK_HASH_CHARS:
        raise _invalid("pack_hash", f"longer than {MAX_PACK_HASH_CHARS} characters")
    if len(_GOOD_HASHES) < 64:
        _GOOD_HASHES.add(text)
    return text


_GOOD_HASHES: set[str] = set()
"""Pack hashes already checked (a handful per process; every bundle of a pass repeats one)."""


def sanitize_bundle(bundle: ProvenanceBundle) -> ProvenanceBundle:
    """Check every field of ``bundle``; return it normalised (UTC time, capped reason).

    Works on bundles built with ``model_construct`` too; raises
    :class:`~stargraph_mem.errors.DeltaValidationError` naming the offending field.
    Returns ``bundle`` itself when nothing needed normalising.
    """
    if not bundle.source_episode_ids:
        raise _invalid("source_episode_ids", "at least one source episode is required")
    ids = [bundle.rule_id, bundle.delta_id, *bundle.source_episode_ids, *bundle.predecessor_ids]
    try:
        joined = "\n".join(ids)
        # the count guards against a newline inside one id splitting it into two valid ones
        all_ok = joined.count("\n") == len(ids) - 1 and _IDS.fullmatch(joined) is not None
    except TypeError:
        all_ok = False
    if not all_ok:  # find the offending one for the message
        _identifier(bundle.rule_id, "rule_id")
        _identifier(bundle.delta_id, "delta_id")
        _identifiers(bundle.source_episode_ids, "source_episode_ids")
        _identifiers(bundle.predecessor_ids, "predecessor_ids")
    check_pack_hash(bundle.pack_hash)
    _unit(bundle.confidence, "confidence")
    _bindings(bundle.bindings)
    promotion_ts = _utc(bundle.promotion_ts, "promotion_ts")
    reason = _reason(bundle.reason)
    sources, predecessors = bundle.source_episode_ids, bundle.predecessor_ids
    if (
        promotion_ts is bundle.promotion_ts
        and reason is bundle.reason
        and type(sources) is tuple
        and type(predecessors) is tuple
    ):
        return bundle
    update = {
        "promotion_ts": promotion_ts,
        "reason": reason,
        "source_episode_ids": tuple(sources),
        "predecessor_ids": tuple(predecessors),
    }
    return bundle.model_copy(update=update)


_FACT_TEXTS: Final = ("user", "agent", "subject", "predicate", "object", "rule_id", "delta_id")


def sanitize_fact(fact: Fact) -> Fact:
    """Check a fact's identity, text and payload; return it with UTC datetimes."""
    _identifier(fact.id, "fact.id")
    _texts(fact, _FACT_TEXTS, "fact.")
    if fact.payload:
        try:
            check_storable(fact.payload, "fact.payload")
        except ValueError as exc:
            raise _invalid("fact.payload", str(exc)) from exc
    _unit(fact.confidence, "fact.confidence")
    valid_from = _utc(fact.valid_from, "fact.valid_from")
    recorded_at = _utc(fact.recorded_at, "fact.recorded_at")
    if valid_from is fact.valid_from and recorded_at is fact.recorded_at:
        return fact
    return fact.model_copy(update={"valid_from": valid_from, "recorded_at": recorded_at})


def clean_pairs(pairs: Sequence[tuple[Fact, ProvenanceBundle]]) -> bool:
    """True when :func:`sanitize_fact` and :func:`sanitize_bundle` would pass every pair
    unchanged, checked at once (one id match, one NUL scan, one range check); False when
    any pair needs a closer look (or normalising), not necessarily that one is bad."""
    ids: list[str] = []
    texts: list[Any] = []  # the join refuses anything but strings
    units: list[object] = []
    stamps: list[object] = []
    try:
        for fact, bundle in pairs:
            sources, predecessors = bundle.source_episode_ids, bundle.predecessor_ids
            if (
                fact.delta_id != bundle.delta_id
                or fact.rule_id != bundle.rule_id
                or not sources
                or type(sources) is not tuple
                or type(predecessors) is not tuple
                or bundle.pack_hash not in _GOOD_HASHES
                or len(bundle.reason) > MAX_REASON_CHARS
            ):
                return False
            if fact.payload:
                check_storable(fact.payload, "fact.payload")
            ids += (fact.id, bundle.rule_id, bundle.delta_id, *sources, *predecessors)
            texts += (fact.user, fact.agent, fact.subject, fact.predicate, fact.object)
            texts += (bundle.reason, *bundle.bindings, *bundle.bindings.values())
            units += (fact.confidence, bundle.confidence)
            stamps += (fact.valid_from, fact.recorded_at, bundle.promotion_ts)
        joined = "\n".join(ids)
        if joined.count("\n") != len(ids) - 1 or _IDS.fullmatch(joined) is None:
            return False
        if not _clean_text("".join(texts)):
            return False
        if not {type(unit) for unit in units} <= {float, int}:
            return False
        numbers: list[float] = units  # type: ignore[assignment]
        low, high, total = min(numbers, default=0.0), max(numbers, default=0.0), sum(numbers)
        if low < 0.0 or high > 1.0 or not math.isfinite(total):
            return False
        return {type(ts) for ts in stamps} <= {datetime} and all(
            ts.utcoffset() == _ZERO  # type: ignore[attr-defined]
            for ts in stamps
        )
    except (TypeError, ValueError, AttributeError):
        return False


# --- the adapter --------------------------------------------------------------------------


FactListener = Callable[[Fact, ProvenanceBundle], None]
"""Called with each newly asserted fact and its bundle (e.g. an engine's working memory)."""


class ProvenanceAdapter:
    """Sanitises ``(fact, bundle)`` pairs, stages them for the store and tells listeners.

    Listeners run inside the store's open transaction: if one raises, the whole batch rolls
    back, so listener-side state must be rebuilt from the store after a failed batch.
    """

    def __init__(self, listeners: Sequence[FactListener] = ()) -> None:
        self.listeners: list[FactListener] = list(listeners)
        self._staged: list[tuple[Fact, ProvenanceBundle]] = []

    def assert_with_provenance(self, fact: Fact, bundle: ProvenanceBundle) -> ProvenanceBundle:
        """Sanitise, stage for insertion (fact + lineage) and notify; return the clean bundle."""
        clean = sanitize_bundle(bundle)
        checked = sanitize_fact(fact)
        if checked.delta_id != clean.delta_id or checked.rule_id != clean.rule_id:
            raise _invalid("fact.delta_id", "fact and bundle name different deltas or rules")
        self._staged.append((checked, clean))
        for listener in self.listeners:
            listener(checked, clean)
        return clean

    def assert_many(self, pairs: Sequence[tuple[Fact, ProvenanceBundle]]) -> None:
        """:meth:`assert_with_provenance` for each pair, in order; pairs that are clean as
        they are (:func:`clean_pairs`) are checked together.

        A bad pair raises :class:`DeltaValidationError` with ``position`` (its index in
        ``pairs``) in the context; the pairs before it stay staged, like one-by-one calls.
        """
        if not clean_pairs(pairs):
            for position, (fact, bundle) in enumerate(pairs):
                try:
                    self.assert_with_provenance(fact, bundle)
                except DeltaValidationError as exc:
                    exc.context["position"] = position
                    raise
            return
        self._staged += pairs
        if self.listeners:
            for fact, bundle in pairs:
                for listener in self.listeners:
                    listener(fact, bundle)

    def take_staged(self) -> list[tuple[Fact, ProvenanceBundle]]:
        """The pairs staged since the last call (the store inserts them), clearing the stage."""
        staged, self._staged = self._staged, []
        return staged

    def discard(self) -> None:
        """Forget staged pairs (after a rolled-back batch)."""
        self._staged = []


FathomAdapter = ProvenanceAdapter
"""The specification's name for the adapter: ``FathomAdapter.assert_with_provenance(fact,
bundle)`` is the seam every delta's fact goes through (stargraph 0.8's adapter class)."""


# --- results and read models ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EngineFact:
    """A current fact as the consolidation runtime sees it; built without pydantic.

    ``reinforced_at_us`` is the later of ``valid_from_us`` and the latest reinforcement.
    """

    id: str
    subject: str
    predicate: str
    object: str
    confidence: float
    valid_from_us: int
    reinforced_at_us: int
    rule_id: str
    source_episode_ids: tuple[str, ...] = ()
    observed_us: int = 0
    """The time of the newest episode it was derived from (0: unknown, use ``valid_from``)."""
    reinforcement_count: int = 0
    """Confirmations so far: reinforcing noops, plus counts carried by updates."""
    access_count: int = 0
    """Access-recording reads of it (and of the facts it superseded)."""
    last_access_us: int = 0
    """The latest access-recording read (0: never read)."""
    pinned: bool = False
    """Pinned facts are left alone by sweeps unless a rule tests ``pinned``."""
    status: str = "current"
    """``current``, or ``archived`` for an archived fact a rule asked to see."""
    payload: Mapping[str, Any] | None = None
    """The fact's payload (``None``: empty)."""
    layer: str = DEFAULT_LAYER
    memory_type: str = DEFAULT_MEMORY_TYPE
    trust: float = 1.0
    """Specification 004's layer, memory type and source trust (see
    :mod:`stargraph_mem.model.layers`)."""

    # the times as rules read them (a pass knows every fact's observation time)
    @property
    def valid_from(self) -> datetime:
        return from_us(self.valid_from_us)

    @property
    def last_access(self) -> datetime:
        """The latest read; a never-read fact's is its ``valid_from``."""
        return from_us(self.last_access_us or self.valid_from_us)

    @property
    def observed_at(self) -> datetime:
        return from_us(self.observed_us)

    @property
    def reinforced_at(self) -> datetime:
        return from_us(self.reinforced_at_us)


class WatermarkAdvance(_Frozen):
    """Move the watermark of (pack, rule, partition) to ``last_seq``; never backwards."""

    pack: str = Field(min_length=1, max_length=MAX_PACK_HASH_CHARS, pattern=r"^[^\x00]*$")
    rule_id: Identifier
    partition: Partition
    last_seq: int = Field(ge=0)

    _partition = field_validator("partition")(_checked_partition)


class Rejection(_Frozen):
    """An episode (or delta) the runtime could not use, recorded with the batch."""

    id: Identifier
    pack: str = Field(max_length=MAX_PACK_HASH_CHARS, pattern=r"^[^\x00]*$")
    rule_id: Identifier
    partition: Partition
    reason: str
    at: StoredDatetime | None = None

    _partition = field_validator("partition")(_checked_partition)

    @field_validator("reason")
    @classmethod
    def _cap_reason(cls, value: str) -> str:
        """NUL-free; longer than ``MAX_REASON_CHARS`` is cut (ending in ``…``)."""
        try:
            return _reason(value)
        except DeltaValidationError as exc:
            raise ValueError(exc.message) from exc


class ApplyResult(_Frozen):
    """What one ``apply_deltas`` call did."""

    added: int = 0
    updated: int = 0
    deleted: int = 0
    noops: int = 0
    """Deltas applied by kind (each kind's ``counted_as`` names its field)."""
    skipped: int = 0
    reinforced: int = 0
    rejections: int = 0
    created_fact_ids: tuple[str, ...] = ()
    closed_fact_ids: tuple[str, ...] = ()
    watermarks: tuple[WatermarkAdvance, ...] = ()
    version: int | None = None
    """With ``apply_deltas(version_of=partition)``: that partition's version once the batch
    is applied (see ``SQLiteFactStore.version``), read inside the same transaction."""

    @property
    def applied(self) -> int:
        """Deltas applied (skipped ones excluded)."""
        return sum(getattr(self, cls.counted_as) for cls in DELTA_BY_KIND.values())


class AuditRow(_Frozen):
    """One applied delta, in application order (``seq``)."""

    seq: int
    delta_id: str
    kind: str
    rule_id: str
    pack_hash: str
    user: str
    agent: str
    applied_at: AwareDatetime
    delta: MemoryDelta


class SourceEpisode(_Frozen):
    """A source episode of a fact; fields are ``None`` when the episode store lacks it."""

    id: str
    session: str | None = None
    timestamp: AwareDatetime | None = None
    content: str | None = None


class Explanation(_Frozen):
    """Everything known about why a fact exists and what became of it."""

    fact: Fact
    provenance: ProvenanceBundle
    source_episodes: tuple[SourceEpisode, ...]
    predecessors: tuple[Fact, ...] = ()
    successors: tuple[Fact, ...] = ()
    closed_by: str | None = None
    audit: tuple[AuditRow, ...] = ()
    status_history: tuple[StatusEvent, ...] = ()

    @property
    def rule_id(self) -> str:
        return self.provenance.rule_id

    @property
    def pack_hash(self) -> str:
        return self.provenance.pack_hash

    @property
    def reason(self) -> str:
        return self.provenance.reason

    @property
    def bindings(self) -> dict[str, BindingValue]:
        return self.provenance.bindings


# --- the protocol -------------------------------------------------------------------------


@runtime_checkable
class FactStore(Protocol):
    """Promoted facts with provenance, history that is never destroyed, and watermarks."""

    async def bootstrap(self) -> None: ...

    async def health(self) -> StoreHealth: ...

    async def migrate(self, plan: MigrationPlan) -> None: ...

    async def close(self) -> None: ...

    async def apply_delta(self, delta: DeltaInput, *, pack_hash: str = "") -> ApplyResult: ...

    async def apply_deltas(
        self,
        deltas: Sequence[DeltaInput],
        *,
        pack_hash: str = "",
        watermarks: Sequence[WatermarkAdvance] = (),
        rejections: Sequence[Rejection] = (),
    ) -> ApplyResult: ...

    async def query(self, pattern: FactPattern) -> list[Fact]: ...

    async def as_of(self, t: datetime, pattern: FactPattern | None = None) -> list[Fact]: ...

    async def get(self, fact_id: str) -> Fact: ...

    async def current_facts(self, partition: Partition) -> list[EngineFact]: ...

    async def watermark(self, pack: str, rule_id: str, partition: Partition) -> int: ...

    async def watermarks(self, pack: str, partition: Partition) -> dict[str, int]: ...

    async def audit_rows(self, partition: Partition | None = None) -> list[AuditRow]: ...

    async def rejections(self, partition: Partition | None = None) -> list[Rejection]: ...

    async def lineage(self, fact_id: str) -> ProvenanceBundle: ...

    async def explain(self, fact_id: str) -> Explanation: ...
