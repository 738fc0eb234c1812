"""Fact store rows, backend-neutral: decoding, the rows a batch writes, validation, filters.

Both backends store the same columns in the same order (times as UTC microseconds), so a
row read from SQLite or PostgreSQL decodes here to equal models.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
from pydantic import ValidationError

from stargraph_mem.errors import CorruptRowError, DeltaProvenanceError, DeltaValidationError
from stargraph_mem.model.deltas import DELTA_ADAPTER, DELTA_KINDS, Delta, FactDelta
from stargraph_mem.model.facts import Fact, FactHit, FactPattern
from stargraph_mem.model.limits import KEY_BYTES, utf8_size
from stargraph_mem.model.time import from_us
from stargraph_mem.stores.fact import (
    AuditRow,
    DeltaInput,
    EngineFact,
    ProvenanceBundle,
    Rejection,
    WatermarkAdvance,
)
from stargraph_mem.stores.repositories.aggregates import AggregateWrite
from stargraph_mem.stores.repositories.fact_filter import (
    FACT_COLUMN_COUNT,
    fact_select,
    key_of,
    pattern_filter,
)
from stargraph_mem.stores.repositories.fact_statements import FactStatements
from stargraph_mem.stores.repositories.pass_time import PassTime
from stargraph_mem.stores.repositories.schedule_runs import RuleRun
from stargraph_mem.stores.scope import Partition, partition_key
from stargraph_mem.stores.sql_conn import Conn

__all__ = [
    "AUDIT_INSERT_COLUMNS",
    "FACT_COLUMN_COUNT",
    "FACT_INSERT_COLUMNS",
    "KINDS",
    "LINEAGE_INSERT_COLUMNS",
    "Delta",
    "PassBasis",
    "PassWrite",
    "audit_from_row",
    "bundle_from_row",
    "claim_holder",
    "corrupt",
    "engine_fact",
    "fact_from_row",
    "fact_query",
    "hits",
    "holder_is_dead",
    "json_text",
    "key_of",
    "pattern_filter",
    "rejection_from_row",
    "validate_deltas",
    "write_rows",
]

KINDS: Final = DELTA_KINDS
_UNION_TAGS: Final = frozenset({"str", "bool", "int", "float", "none"})
"""Union member names pydantic puts in error locations (binding values are a union)."""
_EMPTY_OBJECT: Final = b"{}"
FACT_INSERT_COLUMNS: Final = (
    "rowid",
    "id",
    "user",
    "agent",
    "partition_key",
    "subject",
    "predicate",
    "object",
    "payload",
    "confidence",
    "valid_from_us",
    "recorded_at_us",
    "rule_id",
    "delta_id",
    "layer",
    "memory_type",
    "trust",
    "observed_us",
    "reinforced_us",
    "reinforcement_base",
    "valid_until_us",
    "superseded_by",
    "closed_by",
    "status",
)
"""The columns of the rows a batch inserts into ``facts`` (``fact_rows.write_rows`` and
the closing columns), in order."""
LINEAGE_INSERT_COLUMNS: Final = (
    "rowid",
    "fact_id",
    "rule_id",
    "pack_hash",
    "delta_id",
    "source_episode_ids",
    "promotion_ts_us",
    "confidence",
    "reason",
    "bindings",
    "predecessor_ids",
    "audit_seq",
)
AUDIT_INSERT_COLUMNS: Final = (
    "seq",
    "delta_id",
    "kind",
    "rule_id",
    "pack_hash",
    "user",
    "agent",
    "partition_key",
    "applied_at_us",
    "delta",
)
"""The columns of the rows a batch inserts into ``lineage`` and ``audit``, in order."""

_HOST: Final = socket.gethostname()


def claim_holder() -> str:
    """A new claim holder name: ``host/pid/token`` (a dead holder on this host is seen)."""
    return f"{_HOST}/{os.getpid()}/{uuid.uuid4().hex}"


def holder_is_dead(holder: str) -> bool:
    """Whether ``holder`` names a process of this host that no longer runs."""
    host, _, rest = holder.partition("/")
    pid_text = rest.partition("/")[0]
    if host != _HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by someone else
        return False
    return False


@dataclass(frozen=True, slots=True)
class PassBasis:
    """What a pass read, checked again inside the transaction that applies it.

    ``marks`` are the pack's stored watermarks for the partition and ``version`` the
    partition's facts version (see ``FactStore.version``) the pass was computed
    from; if either changed, :class:`StalePassError` rolls the batch back. ``holder`` names
    the partition claim the pass runs under: the apply renews it until ``expires_us``, or
    gives it up when ``release`` (a run's last pass). A pass without a claim is refused
    the same way while someone else holds an unexpired claim (at ``now_us``).
    ``time`` (a consolidation pass) is its pass time, the episodes it leaves for later and
    the deferred ones it consumes (which must still be stored: see
    :mod:`~stargraph_mem.stores.repositories.pass_time`).
    """

    pack: str
    partition: Partition
    marks: dict[str, int]
    version: int
    holder: str = ""
    expires_us: int = 0
    release: bool = False
    now_us: int = 0
    time: PassTime | None = None


@dataclass(frozen=True, slots=True)
class PassWrite:
    """One computed pass for ``apply_passes``: what it read (``basis``, without a claim
    holder) and what it writes."""

    basis: PassBasis
    deltas: Sequence[DeltaInput] = ()
    watermarks: Sequence[WatermarkAdvance] = ()
    rejections: Sequence[Rejection] = ()
    runs: Sequence[RuleRun] = ()
    aggregates: AggregateWrite | None = None


# --- conversions ------------------------------------------------------------------------


def json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def corrupt(table: str, row_id: object, exc: Exception) -> CorruptRowError:
    return CorruptRowError(f"{table} row {row_id!r} is corrupt: {exc}", table=table, row_id=row_id)


def fact_from_row(row: Sequence[Any]) -> Fact:
    """A validated :class:`Fact` from a ``fact_columns`` row."""
    try:
        return Fact(
            id=row[0],
            user=row[1],
            agent=row[2],
            subject=row[3],
            predicate=row[4],
            object=row[5],
            payload=orjson.loads(row[6]),
            confidence=row[7],
            valid_from=from_us(row[8]),
            valid_until=None if row[9] is None else from_us(row[9]),
            superseded_by=row[10],
            recorded_at=from_us(row[11]),
            rule_id=row[12],
            delta_id=row[13],
            status="current" if row[14] is None else row[14],
            layer=row[15],
            memory_type=row[16],
            trust=row[17],
        )
    except (ValueError, TypeError, OverflowError) as exc:
        raise corrupt("facts", row[0], exc) from exc


async def with_provenance(db: Conn, sql: FactStatements, facts: list[Fact]) -> list[Fact]:
    """``facts`` carrying their lineage and pin time (``Fact.lineage``, ``Fact.pinned_at``),
    read in one statement."""
    if not facts:
        return facts
    ids = list(dict.fromkeys(fact.id for fact in facts))
    found: dict[str, tuple[list[dict[str, Any]], int | None]] = {}
    for row in await db.fetch(sql.provenance_in, (sql.ids(ids),)):
        fact_id = str(row[0])
        entries: list[dict[str, Any]] = []
        if row[1] is not None:
            bundle = bundle_from_row(fact_id, row[1:10])
            entries.append(
                {
                    "rule_id": bundle.rule_id,
                    "source_episode_ids": list(bundle.source_episode_ids),
                    "promotion_ts": bundle.promotion_ts.isoformat(),
                    "delta_id": bundle.delta_id,
                    "pack_hash": bundle.pack_hash,
                    "confidence": bundle.confidence,
                    "reason": bundle.reason,
                }
            )
        found[fact_id] = (entries, None if row[10] is None else int(row[10]))
    out = []
    for fact in facts:
        entries, pinned_us = found.get(fact.id, ([], None))
        out.append(fact.with_provenance(entries, None if pinned_us is None else from_us(pinned_us)))
    return out


def bundle_from_row(fact_id: str, row: Sequence[Any]) -> ProvenanceBundle:
    """A :class:`ProvenanceBundle` from a ``lineage_columns`` row."""
    try:
        return ProvenanceBundle(
            rule_id=row[0],
            pack_hash=row[1],
            delta_id=row[2],
            source_episode_ids=orjson.loads(row[3]),
            promotion_ts=from_us(row[4]),
            confidence=row[5],
            reason=row[6],
            bindings=orjson.loads(row[7]),
            predecessor_ids=orjson.loads(row[8]),
        )
    except (ValueError, TypeError, OverflowError) as exc:
        raise corrupt("lineage", fact_id, exc) from exc


def audit_from_row(row: Sequence[Any]) -> AuditRow:
    """An :class:`AuditRow` from an ``audit_columns`` row (the delta re-validated)."""
    try:
        return AuditRow(
            seq=row[0],
            delta_id=row[1],
            kind=row[2],
            rule_id=row[3],
            pack_hash=row[4],
            user=row[5],
            agent=row[6],
            applied_at=from_us(row[7]),
            delta=DELTA_ADAPTER.validate_json(row[8]),
        )
    except (ValueError, TypeError, OverflowError) as exc:
        raise corrupt("audit", row[0], exc) from exc


def engine_fact(row: Sequence[Any], status: str = "current") -> EngineFact:
    """An :class:`EngineFact` from a current-facts row (``ENGINE_COLUMNS``), without pydantic."""
    try:
        sources = tuple(orjson.loads(row[8]))
        payload = None if bytes(row[14]) == _EMPTY_OBJECT else orjson.loads(row[14])
    except orjson.JSONDecodeError as exc:
        raise corrupt("facts", row[0], exc) from exc
    return EngineFact(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        row[7],
        sources,
        int(row[9]),
        int(row[10]),
        int(row[11]),
        int(row[12]),
        row[13] is not None,
        status if row[15] is None else str(row[15]),
        payload,
        row[16],
        row[17],
        float(row[18]),
    )


def rejection_from_row(row: Sequence[Any]) -> Rejection:
    """A :class:`Rejection` from an ``id, pack, rule_id, user, agent, reason, at_us`` row."""
    rid, pack, rule_id, user, agent, reason, at_us = row
    partition = Partition(user, agent)
    return Rejection(
        id=rid, pack=pack, rule_id=rule_id, partition=partition, reason=reason, at=from_us(at_us)
    )


def hits(rows: Sequence[Sequence[Any]]) -> list[FactHit]:
    """Search rows (fact columns, then the score) as hits."""
    return [FactHit(fact=fact_from_row(row), score=float(row[-1])) for row in rows]


def write_rows(
    rowid: int,
    fact: Fact,
    bundle: ProvenanceBundle,
    audit_seq: int,
    recorded_us: int,
    valid_from_us: int,
    lifecycle: tuple[int | None, int, int] = (None, 0, 0),
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The ``facts`` and ``lineage`` rows (sharing ``rowid``) of one staged ``(fact,
    bundle)`` pair (``valid_from_us``: the bundle's promotion time; ``lifecycle``: its
    newest observation, reinforcement time and reinforcement count base)."""
    fact_row = (
        rowid,
        fact.id,
        fact.user,
        fact.agent,
        key_of(fact.user, fact.agent),
        fact.subject,
        fact.predicate,
        fact.object,
        orjson.dumps(fact.payload) if fact.payload else _EMPTY_OBJECT,
        fact.confidence,
        valid_from_us,
        recorded_us,
        fact.rule_id,
        fact.delta_id,
        fact.layer,
        fact.memory_type,
        fact.trust,
        *lifecycle,
    )
    lineage_row = (
        rowid,
        fact.id,
        bundle.rule_id,
        bundle.pack_hash,
        bundle.delta_id,
        json_text(bundle.source_episode_ids),
        valid_from_us,
        bundle.confidence,
        bundle.reason,
        json_text(bundle.bindings),
        json_text(bundle.predecessor_ids),
        audit_seq,
    )
    return fact_row, lineage_row


# --- validation ---------------------------------------------------------------------------


PROVENANCE_FIELDS: Final = frozenset(
    ("rule_id", "source_episode_ids", "promotion_ts", "confidence", "replaces")
)
"""Fields whose failure is a :class:`DeltaProvenanceError` (the specification's mandatory
provenance, and ``replaces`` on update and delete)."""


def _validation_error(index: int, exc: ValidationError) -> DeltaValidationError:
    """Name the index and the first failing field (the union's ``kind`` tag dropped)."""
    first = exc.errors(include_url=False)[0]
    loc = [str(part) for part in first["loc"]]
    if loc and loc[0] in KINDS:
        loc = loc[1:]
    loc = [part for part in loc if part not in _UNION_TAGS and not part.startswith("list[")]
    field = ".".join(loc) or "kind"
    body = first["input"] if not first["loc"] else None
    given = exc.errors(include_url=False)
    kind = _given(given, "kind")
    provenance = field.split(".")[0] in PROVENANCE_FIELDS
    error = DeltaProvenanceError if provenance else DeltaValidationError
    return error(
        f"deltas[{index}].{field}: {first['msg']}",
        index=index,
        field=field,
        violation=f"{field}: {first['msg']}",
        rule_id=_given(given, "rule_id", body),
        delta_type=kind,
    )


def _given(errors: Sequence[Any], name: str, body: object = None) -> str | None:
    """A top-level string field of the delta that failed (stargraph 0.8's error fields)."""
    for error in errors:
        source = error.get("input") if len(error["loc"]) <= 2 else None
        if isinstance(source, dict) and isinstance(source.get(name), str):
            return str(source[name])
    if isinstance(body, dict) and isinstance(body.get(name), str):
        return str(body[name])
    return None


def validate_deltas(items: Iterable[DeltaInput]) -> list[Delta]:
    """Validate every item through ``DELTA_ADAPTER`` (dicts or models), before any write;
    a fact whose indexed key would not fit an index row is refused (:func:`key_problem`)."""
    out: list[Delta] = []
    for index, item in enumerate(items):
        try:
            delta = DELTA_ADAPTER.validate_python(item)
        except ValidationError as exc:
            raise _validation_error(index, exc) from exc
        problem = key_problem(delta)
        if problem is not None:
            raise DeltaValidationError(
                f"deltas[{index}].fact: {problem}", index=index, field="fact"
            )
        out.append(delta)
    return out


def key_problem(delta: Delta) -> str | None:
    """Why an add's or update's fact would not fit an index row, or ``None``: its subject
    and predicate, with its partition key when the delta names its scope, over
    :data:`~stargraph_mem.model.limits.KEY_BYTES` (UTF-8 bytes)."""
    if not isinstance(delta, FactDelta):
        return None
    subject, predicate, _ = delta.fact.triple  # "" for a payload-only fact
    if (len(subject) + len(predicate)) * 4 <= KEY_BYTES // 2:
        return None
    size = utf8_size(subject) + utf8_size(predicate)
    scope = 0
    if delta.user is not None and delta.agent is not None:
        scope = utf8_size(partition_key(delta.user, delta.agent))
    if size + scope <= KEY_BYTES:
        return None
    return (
        f"subject and predicate are {size:,} bytes (UTF-8) beside a partition key of "
        f"{scope:,}: over the {KEY_BYTES:,} an index row holds (KEY_BYTES)"
    )


# --- filters ------------------------------------------------------------------------------


def fact_query(
    sql: FactStatements, pattern: FactPattern, *, as_of_us: int | None = None
) -> tuple[str, list[Any]]:
    """The SQL and parameters of ``query`` (or of ``as_of`` when ``as_of_us`` is given),
    in the dialect of ``sql``."""
    return fact_select(
        pattern, mark=sql.mark, columns=sql.fact_columns, no_limit=sql.no_limit, as_of_us=as_of_us
    )
