"""Promoted facts over SQLite (aiosqlite), with provenance, audit, watermarks and history.

Update and delete close a fact's validity (``valid_until_us``, ``superseded_by``,
``closed_by``); rows are never deleted. A batch of deltas, its watermark advances and its
rejections are applied in one ``BEGIN IMMEDIATE`` transaction with ``executemany``
per table and chunk, so a failure anywhere leaves the file exactly as it was.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

import aiosqlite
import orjson
from pydantic import ValidationError

from stargraph_mem.errors import (
    CorruptRowError,
    DeltaValidationError,
    FactConflictError,
    FactNotFoundError,
    StalePassError,
    StoreError,
)
from stargraph_mem.gcpause import gc_paused
from stargraph_mem.model.deltas import DELTA_ADAPTER, AddDelta, DeleteDelta, NoopDelta, UpdateDelta
from stargraph_mem.model.facts import Fact, FactAccess, FactHit, FactPattern
from stargraph_mem.model.time import from_us, seconds_us, to_us, utc_now
from stargraph_mem.stores.delta_scope import resolve_scopes
from stargraph_mem.stores.fact import (
    ApplyResult,
    AuditRow,
    DeltaInput,
    EngineFact,
    Explanation,
    ProvenanceAdapter,
    ProvenanceBundle,
    Rejection,
    SourceEpisode,
    WatermarkAdvance,
    aware_utc,
    check_pack_hash,
    sanitize_bundle,
    trusted,
)
from stargraph_mem.stores.models import MigrationPlan
from stargraph_mem.stores.scope import Partition, partition_key, prefix_upper_bound, user_prefix
from stargraph_mem.stores.sqlite_base import (
    WAL_AUTOCHECKPOINT_PAGES,
    SQLiteStoreBase,
    fetch,
    open_connection,
    scalar,
    transaction,
)
from stargraph_mem.stores.sqlite_migration import Ledger, apply_plan, check_plan
from stargraph_mem.stores.sqlite_schedule import RuleRun, record_runs
from stargraph_mem.stores.sqlite_search import (
    INDEX_FACT,
    SEARCH_BACKFILL,
    SEARCH_SCHEMA,
    SEARCH_TABLES,
    TOUCH,
    body_text,
    check_limit,
    match_expression,
    search_pattern,
    search_query,
)

__all__ = [
    "CHUNK",
    "SCHEMA_VERSION",
    "PassBasis",
    "SQLiteFactStore",
    "claim_holder",
    "fact_query",
    "validate_deltas",
]

SCHEMA_VERSION: Final = 3
"""2: lineage rows share their fact's rowid and name the creating audit row; audit delta
ids are indexed for delete and noop deltas only. 3: the full-text index of facts and the
access table (:mod:`~stargraph_mem.stores.sqlite_search`). Versions 1 and 2 are
migrated on open."""
_LEDGER: Final = Ledger(
    "fact_store_migrations",
    "INSERT INTO fact_store_migrations (name, applied_at_us, plan) VALUES (?, ?, ?)",
    "CREATE TABLE IF NOT EXISTS fact_store_migrations "
    "(name TEXT PRIMARY KEY, applied_at_us INTEGER NOT NULL, plan BLOB NOT NULL)",
)
CHUNK: Final = 10_000
"""Deltas handled per ``executemany`` round inside the one transaction of a batch."""

CACHE_KIB: Final = -65536
"""Page cache of this store's connection (negative: KiB): big batches touch large indexes."""

Delta = AddDelta | UpdateDelta | DeleteDelta | NoopDelta
_KINDS: Final = ("add", "update", "delete", "noop")
_UNION_TAGS: Final = frozenset({"str", "bool", "int", "float", "none"})
"""Union member names pydantic puts in error locations (binding values are a union)."""

_LINEAGE_TABLE: Final = """CREATE TABLE IF NOT EXISTS {name} (
        fact_id TEXT NOT NULL,
        delta_id TEXT NOT NULL,
        rule_id TEXT NOT NULL,
        pack_hash TEXT NOT NULL,
        source_episode_ids TEXT NOT NULL,
        promotion_ts_us INTEGER NOT NULL,
        confidence REAL NOT NULL,
        reason TEXT NOT NULL,
        bindings TEXT NOT NULL,
        predecessor_ids TEXT NOT NULL,
        audit_seq INTEGER NOT NULL
    )"""
_AUDIT_TABLE: Final = """CREATE TABLE IF NOT EXISTS {name} (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        delta_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        rule_id TEXT NOT NULL,
        pack_hash TEXT NOT NULL,
        user TEXT NOT NULL,
        agent TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        applied_at_us INTEGER NOT NULL,
        delta TEXT NOT NULL
    )"""
_MARKERS: Final = "kind IN ('delete', 'noop')"
"""Deltas that create no fact: their ids are indexed in the audit table."""
_AUDIT_INDEXES: Final = (
    "CREATE INDEX IF NOT EXISTS audit_partition ON audit (partition_key, seq)",
    f"CREATE UNIQUE INDEX IF NOT EXISTS audit_markers ON audit (delta_id) WHERE {_MARKERS}",
)
_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS fact_store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS facts (
        id TEXT PRIMARY KEY,
        user TEXT NOT NULL,
        agent TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        subject TEXT NOT NULL,
        predicate TEXT NOT NULL,
        object TEXT NOT NULL,
        payload BLOB NOT NULL,
        confidence REAL NOT NULL,
        valid_from_us INTEGER NOT NULL,
        valid_until_us INTEGER NULL,
        superseded_by TEXT NULL,
        closed_by TEXT NULL,
        recorded_at_us INTEGER NOT NULL,
        rule_id TEXT NOT NULL,
        delta_id TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS facts_psp ON facts (partition_key, subject, predicate)",
    """CREATE INDEX IF NOT EXISTS facts_current ON facts (partition_key, subject, predicate)
        WHERE valid_until_us IS NULL""",
    # Ids are content hashes, so every index keyed by one takes writes all over its pages:
    # at a million facts, such indexes dominate a batch's page writes and checkpoints.
    # Hence one such index per fact (facts.id): a lineage row has its fact's rowid, and
    # names the audit row that created the fact (audit_seq); add and update deltas are
    # found through the fact they create ("f" + delta id[1:]), so only delete and noop
    # delta ids need an index of their own.
    _LINEAGE_TABLE.format(name="lineage"),
    _AUDIT_TABLE.format(name="audit"),
    *_AUDIT_INDEXES,
    """CREATE TABLE IF NOT EXISTS reinforcements (
        fact_id TEXT NOT NULL,
        ts_us INTEGER NOT NULL,
        delta_id TEXT NOT NULL,
        PRIMARY KEY (fact_id, ts_us, delta_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS watermarks (
        pack TEXT NOT NULL,
        rule_id TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        last_seq INTEGER NOT NULL,
        updated_at_us INTEGER NOT NULL,
        PRIMARY KEY (pack, rule_id, partition_key)
    )""",
    # a pass reads every rule's watermark of one (pack, partition) at once
    "CREATE INDEX IF NOT EXISTS watermarks_partition ON watermarks (pack, partition_key, rule_id)",
    """CREATE TABLE IF NOT EXISTS rejections (
        id TEXT NOT NULL,
        pack TEXT NOT NULL,
        rule_id TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        user TEXT NOT NULL,
        agent TEXT NOT NULL,
        reason TEXT NOT NULL,
        at_us INTEGER NOT NULL,
        PRIMARY KEY (id, pack, rule_id, partition_key)
    )""",
    "CREATE INDEX IF NOT EXISTS rejections_partition ON rejections (partition_key, at_us)",
    # who consolidates a partition now (any pack): see SQLiteFactStore.claim_partition
    """CREATE TABLE IF NOT EXISTS partition_claims (
        partition_key TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_us INTEGER NOT NULL
    )""",
    *SEARCH_SCHEMA,
    f"INSERT OR IGNORE INTO fact_store_meta (key, value) VALUES ('schema_version', "
    f"'{SCHEMA_VERSION}')",
)
_MIGRATE_V1: Final = (
    _LINEAGE_TABLE.format(name="lineage_v2"),
    # v1 audit delta ids are unique and indexed: the join finds each creating row
    """INSERT INTO lineage_v2 (rowid, fact_id, delta_id, rule_id, pack_hash, source_episode_ids,
        promotion_ts_us, confidence, reason, bindings, predecessor_ids, audit_seq)
    SELECT f.rowid, l.fact_id, l.delta_id, l.rule_id, l.pack_hash, l.source_episode_ids,
        l.promotion_ts_us, l.confidence, l.reason, l.bindings, l.predecessor_ids,
        coalesce((SELECT a.seq FROM audit a WHERE a.delta_id = l.delta_id), 0)
    FROM lineage l JOIN facts f ON f.id = l.fact_id ORDER BY f.rowid""",
    "DROP TABLE lineage",
    "ALTER TABLE lineage_v2 RENAME TO lineage",
    _AUDIT_TABLE.format(name="audit_v2"),
    "INSERT INTO audit_v2 SELECT * FROM audit ORDER BY seq",
    "DROP TABLE audit",
    "ALTER TABLE audit_v2 RENAME TO audit",
    *_AUDIT_INDEXES,
    "UPDATE fact_store_meta SET value = '2' WHERE key = 'schema_version'",
)
"""Version 1 → 2, in the bootstrap transaction: lineage re-keyed by fact rowid with the
creating audit seq; audit rebuilt without the unique index over every delta id."""
_MIGRATE_V2: Final = (
    *SEARCH_SCHEMA,
    SEARCH_BACKFILL,
    "UPDATE fact_store_meta SET value = '3' WHERE key = 'schema_version'",
)
"""Version 2 → 3, in the bootstrap transaction: the current facts are indexed for search."""
TABLES: Final = (
    "fact_store_meta",
    "facts",
    "lineage",
    "audit",
    "reinforcements",
    "watermarks",
    "rejections",
    *SEARCH_TABLES,
)

_FACT_COLUMNS: Final = (
    "id, user, agent, subject, predicate, object, payload, confidence, valid_from_us, "
    "valid_until_us, superseded_by, recorded_at_us, rule_id, delta_id"
)
_LINEAGE_COLUMNS: Final = (
    "rule_id, pack_hash, delta_id, source_episode_ids, promotion_ts_us, confidence, reason, "
    "bindings, predecessor_ids"
)
_AUDIT_COLUMNS: Final = "seq, delta_id, kind, rule_id, pack_hash, user, agent, applied_at_us, delta"
_INSERT_FACT: Final = (
    "INSERT INTO facts (rowid, id, user, agent, partition_key, subject, predicate, object, "
    "payload, confidence, valid_from_us, recorded_at_us, rule_id, delta_id, "
    "valid_until_us, superseded_by, closed_by) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_EMPTY_OBJECT: Final = b"{}"
_OPEN: Final = (None, None, None)
"""``valid_until_us, superseded_by, closed_by`` of a fact that is still current."""
_INSERT_LINEAGE: Final = (
    f"INSERT INTO lineage (rowid, fact_id, {_LINEAGE_COLUMNS}, audit_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_AUDIT: Final = (
    "INSERT INTO audit (seq, delta_id, kind, rule_id, pack_hash, user, agent, partition_key, "
    "applied_at_us, delta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_LAST_ROWID: Final = "SELECT coalesce(max(rowid), 0) FROM facts"
_LAST_SEQ: Final = (
    "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'audit'), 0), "
    "coalesce((SELECT max(seq) FROM audit), 0))"
)
_CLOSE: Final = (
    "UPDATE facts SET valid_until_us = ?, superseded_by = ?, closed_by = ? "
    "WHERE id = ? AND valid_until_us IS NULL"
)
_INSERT_REINFORCEMENT: Final = (
    "INSERT INTO reinforcements (fact_id, ts_us, delta_id) VALUES (?, ?, ?)"
)
_UPSERT_WATERMARK: Final = (
    "INSERT INTO watermarks (pack, rule_id, partition_key, last_seq, updated_at_us) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (pack, rule_id, partition_key) "
    "DO UPDATE SET last_seq = excluded.last_seq, updated_at_us = excluded.updated_at_us"
)
_INSERT_REJECTION: Final = (
    "INSERT OR IGNORE INTO rejections (id, pack, rule_id, partition_key, user, agent, reason, "
    "at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_IN_JSON: Final = "IN (SELECT value FROM json_each(?))"
_STORED_FACTS: Final = f"SELECT id FROM facts WHERE id {_IN_JSON}"
_STORED_MARKERS: Final = f"SELECT delta_id FROM audit WHERE {_MARKERS} AND delta_id {_IN_JSON}"
_FACT_STATES: Final = (
    f"SELECT id, user, agent, valid_from_us, valid_until_us FROM facts WHERE id {_IN_JSON}"
)
_CURRENT: Final = """
    SELECT f.id, f.subject, f.predicate, f.object, f.confidence, f.valid_from_us,
        max(f.valid_from_us, coalesce(
            (SELECT max(r.ts_us) FROM reinforcements r WHERE r.fact_id = f.id), f.valid_from_us)),
        f.rule_id, l.source_episode_ids
    FROM facts f JOIN lineage l ON l.rowid = f.rowid
    WHERE f.partition_key = ? AND f.valid_until_us IS NULL
    ORDER BY f.valid_from_us, f.id"""


_HOST: Final = socket.gethostname()


def claim_holder() -> str:
    """A new claim holder name: ``host/pid/token`` (a dead holder on this host is seen)."""
    return f"{_HOST}/{os.getpid()}/{uuid.uuid4().hex}"


def _holder_is_dead(holder: str) -> bool:
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
    partition's facts version (see :meth:`SQLiteFactStore.version`) the pass was computed
    from; if either changed, :class:`StalePassError` rolls the batch back. ``holder`` names
    the partition claim the pass runs under: the apply renews it until ``expires_us``, or
    gives it up when ``release`` (a run's last pass). A pass without a claim is refused
    the same way while someone else holds an unexpired claim (at ``now_us``).
    """

    pack: str
    partition: Partition
    marks: dict[str, int]
    version: int
    holder: str = ""
    expires_us: int = 0
    release: bool = False
    now_us: int = 0


def _check_pass_scope(deltas: Sequence[Delta], basis: PassBasis) -> None:
    """A pass writes only its own partition."""
    partition = basis.partition
    for index, delta in enumerate(deltas):
        if (delta.user, delta.agent) != (partition.user, partition.agent):
            raise DeltaValidationError(
                f"deltas[{index}]: a pass over {partition.key} emitted a delta for "
                f"({delta.user!r}, {delta.agent!r})",
                index=index,
            )


async def _check_basis(db: aiosqlite.Connection, basis: PassBasis) -> None:
    """Raise :class:`StalePassError` unless the stored state is what the pass read."""
    marks = await _marks(db, basis.pack, basis.partition.key)
    version = await _version(db, basis.partition)
    if marks != basis.marks or version != basis.version:
        raise StalePassError(
            f"pack '{basis.pack}' at {basis.partition.key}: the partition changed while the "
            f"pass was computed (version {basis.version} → {version})",
            pack=basis.pack,
            partition=basis.partition.key,
        )
    key = basis.partition.key
    if not basis.holder:
        other = await _other_claim(db, key, "", basis.now_us)
        if other is not None:
            raise StalePassError(
                f"pack '{basis.pack}' at {key}: the partition is claimed by {other}",
                pack=basis.pack,
                partition=key,
            )
    elif basis.release:
        await db.execute(_DROP_CLAIM, (key, basis.holder))
    else:
        await db.execute(_RENEW_CLAIM, (basis.expires_us, key, basis.holder))


_DROP_CLAIM: Final = "DELETE FROM partition_claims WHERE partition_key = ? AND holder = ?"
_RENEW_CLAIM: Final = (
    "UPDATE partition_claims SET expires_us = ? WHERE partition_key = ? AND holder = ?"
)


async def _other_claim(db: aiosqlite.Connection, key: str, holder: str, now_us: int) -> str | None:
    """Who else holds a live claim on partition ``key`` (None: nobody, or ``holder``).

    A claim that expired, or whose holder ran on this host and no longer runs, is
    cleared here (inside the caller's write transaction).
    """
    rows = await fetch(
        db, "SELECT holder, expires_us FROM partition_claims WHERE partition_key = ?", (key,)
    )
    if not rows or str(rows[0][0]) == holder:
        return None
    other = str(rows[0][0])
    if int(rows[0][1]) > now_us and not _holder_is_dead(other):
        return other
    await db.execute(_DROP_CLAIM, (key, other))
    return None


# --- conversions ------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def _partition_key(user: str, agent: str) -> str:
    return partition_key(user, agent)


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _corrupt(table: str, row_id: object, exc: Exception) -> CorruptRowError:
    return CorruptRowError(f"{table} row {row_id!r} is corrupt: {exc}", table=table, row_id=row_id)


def fact_from_row(row: Sequence[Any]) -> Fact:
    """A validated :class:`Fact` from a ``_FACT_COLUMNS`` row."""
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
        )
    except (ValueError, TypeError, OverflowError) as exc:
        raise _corrupt("facts", row[0], exc) from exc


def bundle_from_row(fact_id: str, row: Sequence[Any]) -> ProvenanceBundle:
    """A :class:`ProvenanceBundle` from a ``_LINEAGE_COLUMNS`` row."""
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
        raise _corrupt("lineage", fact_id, exc) from exc


def audit_from_row(row: Sequence[Any]) -> AuditRow:
    """An :class:`AuditRow` from an ``_AUDIT_COLUMNS`` row (the delta re-validated)."""
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
        raise _corrupt("audit", row[0], exc) from exc


def engine_fact(row: Sequence[Any]) -> EngineFact:
    """An :class:`EngineFact` from a ``_CURRENT`` row, without pydantic."""
    try:
        sources = tuple(orjson.loads(row[8]))
    except orjson.JSONDecodeError as exc:
        raise _corrupt("lineage", row[0], exc) from exc
    return EngineFact(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], sources)


def _indexed(fact_row: tuple[Any, ...]) -> tuple[int, str]:
    """The search index row (rowid, text) of a ``facts`` row built by :func:`_write_rows`."""
    return fact_row[0], body_text(fact_row[5], fact_row[6], fact_row[7], fact_row[8])


def _write_rows(
    rowid: int,
    fact: Fact,
    bundle: ProvenanceBundle,
    audit_seq: int,
    recorded_us: int,
    valid_from_us: int,
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The ``facts`` and ``lineage`` rows (sharing ``rowid``) of one staged ``(fact,
    bundle)`` pair (``valid_from_us``: the bundle's promotion time)."""
    fact_row = (
        rowid,
        fact.id,
        fact.user,
        fact.agent,
        _partition_key(fact.user, fact.agent),
        fact.subject,
        fact.predicate,
        fact.object,
        orjson.dumps(fact.payload) if fact.payload else _EMPTY_OBJECT,
        fact.confidence,
        valid_from_us,
        recorded_us,
        fact.rule_id,
        fact.delta_id,
    )
    lineage_row = (
        rowid,
        fact.id,
        bundle.rule_id,
        bundle.pack_hash,
        bundle.delta_id,
        _json_text(bundle.source_episode_ids),
        valid_from_us,
        bundle.confidence,
        bundle.reason,
        _json_text(bundle.bindings),
        _json_text(bundle.predecessor_ids),
        audit_seq,
    )
    return fact_row, lineage_row


# --- validation ---------------------------------------------------------------------------


def _validation_error(index: int, exc: ValidationError) -> DeltaValidationError:
    """Name the index and the first failing field (the union's ``kind`` tag dropped)."""
    first = exc.errors(include_url=False)[0]
    loc = [str(part) for part in first["loc"]]
    if loc and loc[0] in _KINDS:
        loc = loc[1:]
    loc = [part for part in loc if part not in _UNION_TAGS and not part.startswith("list[")]
    field = ".".join(loc) or "kind"
    return DeltaValidationError(
        f"deltas[{index}].{field}: {first['msg']}", index=index, field=field
    )


def validate_deltas(items: Iterable[DeltaInput]) -> list[Delta]:
    """Validate every item through ``DELTA_ADAPTER`` (dicts or models), before any write."""
    out: list[Delta] = []
    for index, item in enumerate(items):
        try:
            out.append(DELTA_ADAPTER.validate_python(item))
        except ValidationError as exc:
            raise _validation_error(index, exc) from exc
    return out


def _at(index: int, exc: DeltaValidationError) -> DeltaValidationError:
    field = str(exc.context.get("field", ""))
    return DeltaValidationError(f"deltas[{index}].{exc.message}", index=index, field=field)


# --- applying a batch ---------------------------------------------------------------------


@dataclass(slots=True)
class _State:
    """What the batch needs to know about a fact it may close or reinforce."""

    user: str
    agent: str
    valid_from_us: int
    closed: bool


class _Batch:
    """Applies validated deltas inside an open transaction, chunk by chunk.

    Fact states (scope, validity) are mirrored in memory so later deltas see earlier
    ones' effects and conflicts are found before each chunk's rows are written.
    """

    def __init__(
        self, db: aiosqlite.Connection, adapter: ProvenanceAdapter, pack_hash: str, now: datetime
    ) -> None:
        self.db = db
        self.adapter = adapter
        self.pack_hash = pack_hash
        self.now_us = to_us(now, "clock()")
        self.now = now.astimezone(UTC)
        self.known: dict[str, _State] = {}
        self.closed_here: set[str] = set()
        self.seen: set[str] = set()
        self.counts = dict.fromkeys(_KINDS, 0)
        self.skipped = 0
        self.reinforced = 0
        self.created: list[str] = []
        self.closed: list[str] = []
        self._audit: list[tuple[Any, ...]] = []
        self._closes: list[tuple[Any, ...]] = []
        self._reinforcements: list[tuple[Any, ...]] = []
        self._asserting: list[tuple[Fact, ProvenanceBundle]] = []
        self._asserting_at: list[tuple[int, int]] = []
        """The chunk's new (fact, bundle) pairs for the adapter, and for each the index and
        audit seq of its delta."""
        self._rowid = self._seq = -1
        """Last facts rowid and audit seq used (read when the first chunk starts)."""
        self.check_sources: bool | None = None
        """Whether cited episodes are checked against the delta's scope (None: not yet
        known whether this file has an episodes table)."""
        self._last_ts, self._last_us = self.now, self.now_us

    async def apply_chunk(self, start: int, deltas: Sequence[Delta]) -> None:
        """Apply ``deltas`` (indices from ``start``) and write their rows."""
        bodies = [delta.canonical_body() for delta in deltas]
        ids = [delta.delta_id for delta in deltas]
        if self._seq < 0:
            self._rowid = int(await scalar(self.db, _LAST_ROWID) or 0)
            self._seq = int(await scalar(self.db, _LAST_SEQ) or 0)
        stored = await self._stored(deltas, ids)
        await self._load(deltas)
        await self._check_sources(start, deltas)
        for offset, (delta, did, body) in enumerate(zip(deltas, ids, bodies, strict=True)):
            if did in stored or did in self.seen:
                self.skipped += 1
                continue
            self.seen.add(did)
            self._seq += 1
            try:
                self._apply(start + offset, delta, did)
            except DeltaValidationError as exc:
                raise _at(start + offset, exc) from exc
            self._audit_row(delta, did, body)
        pairs, at = self._asserting, self._asserting_at
        self._asserting, self._asserting_at = [], []
        try:
            self.adapter.assert_many(pairs)
        except DeltaValidationError as exc:
            position = exc.context.get("position")
            if position is None:
                raise
            raise _at(at[position][0], exc) from exc
        await self._flush([seq for _, seq in at])

    async def _stored(self, deltas: Sequence[Delta], ids: Sequence[str]) -> set[str]:
        """Ids of ``deltas`` applied before: add and update deltas by the fact they made."""
        made: list[str] = []
        markers: list[str] = []
        for delta, did in zip(deltas, ids, strict=True):
            if isinstance(delta, AddDelta | UpdateDelta):
                made.append("f" + did[1:])
            else:
                markers.append(did)
        stored: set[str] = set()
        if made:
            rows = await fetch(self.db, _STORED_FACTS, (_json_text(made),))
            stored.update("d" + str(row[0])[1:] for row in rows)
        if markers:
            rows = await fetch(self.db, _STORED_MARKERS, (_json_text(markers),))
            stored.update(str(row[0]) for row in rows)
        return stored

    async def _check_sources(self, start: int, deltas: Sequence[Delta]) -> None:
        """Refuse a delta citing an episode of another (user, agent) as its source.

        Ids the file does not hold pass (the fact store may stand alone); a pass's own
        deltas are not checked here (it read them from its partition, see ``PassBasis``).
        """
        if self.check_sources is None:
            self.check_sources = "partition_key" in await _episode_columns(self.db)
        if not self.check_sources:
            return
        cited = sorted({eid for delta in deltas for eid in delta.source_episode_ids})
        if not cited:
            return
        rows = await fetch(
            self.db,
            f"SELECT id, partition_key FROM episodes WHERE id {_IN_JSON}",
            (_json_text(cited),),
        )
        owner = {str(eid): str(key) for eid, key in rows}
        for offset, delta in enumerate(deltas):
            key = _partition_key(delta.user, delta.agent)
            for position, eid in enumerate(delta.source_episode_ids):
                if owner.get(eid, key) != key:
                    field = f"deltas[{start + offset}].source_episode_ids[{position}]"
                    raise DeltaValidationError(
                        f"{field}: episode {eid!r} belongs to another (user, agent) than "
                        f"the delta's ({delta.user!r}, {delta.agent!r})",
                        index=start + offset,
                        field=field,
                    )

    async def _load(self, deltas: Sequence[Delta]) -> None:
        """Read the states of referenced facts the batch has not seen yet."""
        wanted: set[str] = set()
        for delta in deltas:
            if isinstance(delta, UpdateDelta | DeleteDelta):
                wanted.update(delta.replaces)
            elif isinstance(delta, NoopDelta):
                wanted.update(delta.reinforces)
        missing = sorted(wanted - self.known.keys())
        if missing:
            rows = await fetch(self.db, _FACT_STATES, (_json_text(missing),))
            for fid, user, agent, valid_from_us, valid_until_us in rows:
                self.known[fid] = _State(user, agent, valid_from_us, valid_until_us is not None)

    def _apply(self, index: int, delta: Delta, did: str) -> None:
        if isinstance(delta, AddDelta):
            self._assert(index, delta, did, ())
        elif isinstance(delta, UpdateDelta):
            self._close(index, delta, did, "f" + did[1:])
            self._assert(index, delta, did, tuple(delta.replaces))
        elif isinstance(delta, DeleteDelta):
            sanitize_bundle(self._bundle(delta, did, ()))
            self._close(index, delta, did, None)
        else:
            sanitize_bundle(self._bundle(delta, did, ()))
            self._reinforce(index, delta, did)
        self.counts[delta.kind] += 1

    def _bundle(self, delta: Delta, did: str, predecessors: tuple[str, ...]) -> ProvenanceBundle:
        return trusted(
            ProvenanceBundle,
            {
                "rule_id": delta.rule_id,
                "pack_hash": self.pack_hash,
                "delta_id": did,
                "source_episode_ids": tuple(delta.source_episode_ids),
                "promotion_ts": delta.promotion_ts,
                "confidence": delta.confidence,
                "reason": delta.reason,
                "bindings": delta.bindings,
                "predecessor_ids": predecessors,
            },
        )

    def _assert(
        self, index: int, delta: AddDelta | UpdateDelta, did: str, predecessors: tuple[str, ...]
    ) -> None:
        """Stage the delta's fact for the adapter (which checks the chunk's pairs at once)."""
        fact_id = "f" + did[1:]
        payload = delta.fact
        fact = trusted(
            Fact,
            {
                "id": fact_id,
                "user": delta.user,
                "agent": delta.agent,
                "subject": payload.subject,
                "predicate": payload.predicate,
                "object": payload.object,
                "payload": payload.payload,
                "confidence": delta.confidence,
                "valid_from": delta.promotion_ts,
                "valid_until": None,
                "superseded_by": None,
                "recorded_at": self.now,
                "rule_id": delta.rule_id,
                "delta_id": did,
            },
        )
        self._asserting.append((fact, self._bundle(delta, did, predecessors)))
        self._asserting_at.append((index, self._seq))
        user, agent = str(delta.user), str(delta.agent)  # resolved before the batch applies
        self.known[fact_id] = _State(user, agent, self._us(delta.promotion_ts), False)
        self.created.append(fact_id)

    def _us(self, ts: datetime) -> int:
        """``to_us`` for delta times: a pass stamps one time on all its deltas."""
        if ts is not self._last_ts:
            if ts != self._last_ts:
                self._last_us = to_us(aware_utc(ts, "promotion_ts"))
            self._last_ts = ts
        return self._last_us

    def _close(
        self, index: int, delta: UpdateDelta | DeleteDelta, did: str, successor: str | None
    ) -> None:
        self._check_refs(index, delta, did, delta.replaces, "replace")
        until_us = self._us(delta.promotion_ts)
        for fid in delta.replaces:
            state = self.known[fid]
            state.closed = True
            self.closed_here.add(fid)
            self._closes.append((max(until_us, state.valid_from_us), successor, did, fid))
            self.closed.append(fid)

    def _reinforce(self, index: int, delta: NoopDelta, did: str) -> None:
        self._check_refs(index, delta, did, delta.reinforces, "reinforce")
        ts_us = to_us(delta.promotion_ts)
        self._reinforcements.extend((fid, ts_us, did) for fid in delta.reinforces)
        self.reinforced += len(delta.reinforces)

    def _check_refs(
        self, index: int, delta: Delta, did: str, ids: Sequence[str], verb: str
    ) -> None:
        """Raise :class:`FactConflictError` naming every fact ``ids`` cannot resolve to."""
        problems: dict[str, str] = {}
        for position, fid in enumerate(ids):
            problem = self._problem(fid, delta)
            if fid in ids[:position]:
                problem = "named twice in this delta"
            if problem is not None:
                problems.setdefault(fid, problem)
        if problems:
            detail = "; ".join(f"{fid}: {why}" for fid, why in problems.items())
            raise FactConflictError(
                f"deltas[{index}] ({delta.kind} {did}) cannot {verb} {detail}",
                fact_ids=list(problems),
                problems=problems,
                index=index,
                delta_id=did,
            )

    def _problem(self, fid: str, delta: Delta) -> str | None:
        state = self.known.get(fid)
        if state is None:
            return "unknown fact"
        if (state.user, state.agent) != (delta.user, delta.agent):
            return "fact belongs to another (user, agent)"
        if fid in self.closed_here:
            return "already closed earlier in this batch"
        return "fact is already closed" if state.closed else None

    def _audit_row(self, delta: Delta, did: str, body: bytes) -> None:
        self._audit.append(
            (
                self._seq,
                did,
                delta.kind,
                delta.rule_id,
                self.pack_hash,
                delta.user,
                delta.agent,
                _partition_key(delta.user, delta.agent),
                self.now_us,
                body.decode(),
            )
        )

    async def _flush(self, seqs: list[int]) -> None:
        """Write the chunk: new facts and lineage first, so closes can reach them
        (``seqs``: the audit seq of each staged fact's delta).

        A fact created and closed within the chunk is inserted already closed: same rows,
        one write instead of an insert and an update.
        """
        staged = self.adapter.take_staged()
        first = self._rowid + 1
        self._rowid += len(staged)
        rows = [
            _write_rows(
                first + offset,
                fact,
                bundle,
                seq,
                self._recorded_us(fact),
                self._us(bundle.promotion_ts),
            )
            for offset, ((fact, bundle), seq) in enumerate(zip(staged, seqs, strict=True))
        ]
        new_ids = {fact_row[1] for fact_row, _ in rows}
        closing = {close[3]: close[:3] for close in self._closes if close[3] in new_ids}
        closes = [close for close in self._closes if close[3] not in closing]
        writes: tuple[tuple[str, Sequence[Sequence[Any]]], ...] = (
            (_INSERT_FACT, [fact_row + closing.get(fact_row[1], _OPEN) for fact_row, _ in rows]),
            (_INSERT_LINEAGE, [lineage_row for _, lineage_row in rows]),
            (INDEX_FACT, [_indexed(fact_row) for fact_row, _ in rows]),
            (_CLOSE, closes),
            (_INSERT_AUDIT, self._audit),
            (_INSERT_REINFORCEMENT, self._reinforcements),
        )
        for sql, params in writes:
            if params:
                await self.db.executemany(sql, params)
        self._audit, self._closes, self._reinforcements = [], [], []

    def _recorded_us(self, fact: Fact) -> int:
        return self.now_us if fact.recorded_at is self.now else to_us(fact.recorded_at)

    async def advance(self, advances: Sequence[WatermarkAdvance]) -> tuple[WatermarkAdvance, ...]:
        """Move watermarks forward (in order); any step backwards raises :class:`StoreError`."""
        final: dict[tuple[str, str, str], WatermarkAdvance] = {}
        stored: dict[tuple[str, str], dict[str, int]] = {}
        for index, adv in enumerate(advances):
            key = (adv.pack, adv.rule_id, adv.partition.key)
            if key in final:
                prior = final[key].last_seq
            else:
                group = (adv.pack, adv.partition.key)
                if group not in stored:  # one read per (pack, partition), not per rule
                    stored[group] = await _marks(self.db, *group)
                prior = stored[group].get(adv.rule_id, 0)
            if adv.last_seq < prior:
                raise StoreError(
                    f"watermarks[{index}]: {adv.pack}/{adv.rule_id} at {key[2]} would go "
                    f"backwards from {prior} to {adv.last_seq}",
                    index=index,
                    stored=prior,
                    requested=adv.last_seq,
                )
            final[key] = adv
        rows = [(*key, adv.last_seq, self.now_us) for key, adv in final.items()]
        if rows:
            await self.db.executemany(_UPSERT_WATERMARK, rows)
        return tuple(final.values())

    async def reject(self, rejections: Sequence[Rejection]) -> None:
        """Record rejected episodes (a repeat of the same rejection is ignored)."""
        rows = [
            (
                r.id,
                r.pack,
                r.rule_id,
                r.partition.key,
                r.partition.user,
                r.partition.agent,
                r.reason,
                self.now_us if r.at is None else to_us(r.at),
            )
            for r in rejections
        ]
        if rows:
            await self.db.executemany(_INSERT_REJECTION, rows)

    def result(
        self, watermarks: tuple[WatermarkAdvance, ...], rejections: int, version: int | None
    ) -> ApplyResult:
        return ApplyResult(
            version=version,
            added=self.counts["add"],
            updated=self.counts["update"],
            deleted=self.counts["delete"],
            noops=self.counts["noop"],
            skipped=self.skipped,
            reinforced=self.reinforced,
            rejections=rejections,
            created_fact_ids=tuple(self.created),
            closed_fact_ids=tuple(self.closed),
            watermarks=watermarks,
        )


# --- reads --------------------------------------------------------------------------------


async def _marks(db: aiosqlite.Connection, pack: str, partition_key: str) -> dict[str, int]:
    """Every rule's watermark for (pack, partition), by rule id."""
    rows = await fetch(
        db,
        "SELECT rule_id, last_seq FROM watermarks WHERE pack = ? AND partition_key = ? "
        "ORDER BY rule_id",
        (pack, partition_key),
    )
    return {str(rule_id): int(seq) for rule_id, seq in rows}


async def _version(db: aiosqlite.Connection, partition: Partition) -> int:
    value = await scalar(db, "SELECT max(seq) FROM audit WHERE partition_key = ?", (partition.key,))
    return 0 if value is None else int(value)


def _pattern_filter(pattern: FactPattern) -> tuple[list[str], list[Any]]:
    """SQL conditions and parameters for a :class:`FactPattern` (history aside)."""
    where: list[str] = []
    params: list[Any] = []
    if pattern.user is not None and pattern.agent is not None:
        where.append("partition_key = ?")
        params.append(_partition_key(pattern.user, pattern.agent))
    elif pattern.user is not None:
        prefix = user_prefix(pattern.user)
        where.append("partition_key >= ? AND partition_key < ?")
        params += [prefix, prefix_upper_bound(prefix)]
    elif pattern.agent is not None:
        where.append("agent = ?")
        params.append(pattern.agent)
    for column in ("subject", "predicate", "object"):
        value = getattr(pattern, column)
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if pattern.min_confidence is not None:
        where.append("confidence >= ?")
        params.append(pattern.min_confidence)
    return where, params


def fact_query(pattern: FactPattern, *, as_of_us: int | None = None) -> tuple[str, list[Any]]:
    """The SQL and parameters of ``query`` (or of ``as_of`` when ``as_of_us`` is given)."""
    where, params = _pattern_filter(pattern)
    if as_of_us is not None:
        where.append("valid_from_us <= ? AND (valid_until_us IS NULL OR valid_until_us > ?)")
        params += [as_of_us, as_of_us]
    elif not pattern.include_history:
        where.append("valid_until_us IS NULL")
    condition = " AND ".join(where) or "1"
    params.append(-1 if pattern.limit is None else pattern.limit)
    sql = f"SELECT {_FACT_COLUMNS} FROM facts WHERE {condition} ORDER BY valid_from_us, id LIMIT ?"
    return sql, params


async def _facts_with_predecessors(
    db: aiosqlite.Connection, ids: Sequence[str]
) -> dict[str, tuple[Fact, list[str]]]:
    cols = ", ".join(f"f.{c.strip()}" for c in _FACT_COLUMNS.split(","))
    rows = await fetch(
        db,
        f"SELECT {cols}, l.predecessor_ids FROM facts f "
        f"LEFT JOIN lineage l ON l.rowid = f.rowid WHERE f.id {_IN_JSON}",
        (_json_text(list(ids)),),
    )
    return {row[0]: (fact_from_row(row), orjson.loads(row[14] or b"[]")) for row in rows}


async def _predecessors(db: aiosqlite.Connection, first: Sequence[str]) -> list[Fact]:
    """Walk ``predecessor_ids`` back, breadth first, nearest first, each fact once."""
    out: list[Fact] = []
    seen: set[str] = set()
    frontier = list(first)
    while frontier:
        found = await _facts_with_predecessors(db, frontier)
        upcoming: list[str] = []
        for fid in frontier:
            if fid in seen or fid not in found:
                continue
            seen.add(fid)
            fact, earlier = found[fid]
            out.append(fact)
            upcoming += earlier
        frontier = upcoming
    return out


async def _successors(db: aiosqlite.Connection, fact: Fact) -> list[Fact]:
    """Follow ``superseded_by`` forward to the fact that replaced it, and so on."""
    out: list[Fact] = []
    seen = {fact.id}
    nxt = fact.superseded_by
    while nxt is not None and nxt not in seen:
        seen.add(nxt)
        rows = await fetch(db, f"SELECT {_FACT_COLUMNS} FROM facts WHERE id = ?", (nxt,))
        if not rows:
            break
        out.append(fact_from_row(rows[0]))
        nxt = out[-1].superseded_by
    return out


async def _episode_columns(db: aiosqlite.Connection) -> set[str]:
    """Columns of the ``episodes`` table in this file (empty when there is none)."""
    rows = await fetch(db, "SELECT name FROM pragma_table_info('episodes')")
    return {str(row[0]) for row in rows}


async def _source_episodes(
    db: aiosqlite.Connection, ids: Sequence[str], partition_key: str
) -> tuple[SourceEpisode, ...]:
    """Source episodes with content from the ``episodes`` table when it exists; only
    episodes of the fact's own (user, agent) are shown (others by id alone)."""
    columns = await _episode_columns(db)
    found: dict[str, SourceEpisode] = {}
    if {"id", "session", "ts_us", "content", "partition_key"} <= columns:
        rows = await fetch(
            db,
            f"SELECT id, session, ts_us, content FROM episodes WHERE id {_IN_JSON} "
            "AND partition_key = ?",
            (_json_text(list(ids)), partition_key),
        )
        for eid, session, ts_us, content in rows:
            found[eid] = SourceEpisode(
                id=eid, session=session, timestamp=from_us(ts_us), content=content
            )
    return tuple(found.get(eid, SourceEpisode(id=eid)) for eid in ids)


async def _audit_touching(
    db: aiosqlite.Connection, fact: Fact, closed_by: str | None
) -> list[AuditRow]:
    """Audit rows of the delta that made ``fact``, the one that closed it and those that
    reinforced it, in application order.

    An update's row is found through the fact it made (its lineage names the audit seq);
    delete and noop rows through their indexed delta ids.
    """
    made = [fact.id] + ([] if closed_by is None else ["f" + closed_by[1:]])
    by_seq = await fetch(
        db,
        f"SELECT {_AUDIT_COLUMNS} FROM audit WHERE seq IN (SELECT l.audit_seq FROM facts f "
        f"JOIN lineage l ON l.rowid = f.rowid WHERE f.id {_IN_JSON})",
        (_json_text(made),),
    )
    markers = [] if closed_by is None else [closed_by]
    markers += [
        str(row[0])
        for row in await fetch(
            db, "SELECT delta_id FROM reinforcements WHERE fact_id = ?", (fact.id,)
        )
    ]
    by_id = await fetch(
        db,
        f"SELECT {_AUDIT_COLUMNS} FROM audit WHERE {_MARKERS} AND delta_id {_IN_JSON}",
        (_json_text(markers),),
    )
    unique = {int(row[0]): row for row in [*by_seq, *by_id]}
    return [audit_from_row(unique[seq]) for seq in sorted(unique)]


async def _stored_version(db: aiosqlite.Connection) -> int | None:
    """The file's fact store schema version; None before the first bootstrap."""
    if not await fetch(db, "SELECT 1 FROM sqlite_master WHERE name = 'fact_store_meta'"):
        return None
    value = await scalar(db, "SELECT value FROM fact_store_meta WHERE key = 'schema_version'")
    try:
        return None if value is None else int(value)
    except ValueError as exc:
        raise _corrupt("fact_store_meta", "schema_version", exc) from exc


def _hits(rows: Sequence[Sequence[Any]]) -> list[FactHit]:
    """Search rows (fact columns, then the score) as hits."""
    return [FactHit(fact=fact_from_row(row), score=float(row[-1])) for row in rows]


# --- the store ----------------------------------------------------------------------------


class SQLiteFactStore(SQLiteStoreBase):
    """The :class:`~stargraph_mem.stores.fact.FactStore` over one SQLite file.

    By default the same file as the episode store. ``clock`` (tz-aware) stamps
    ``recorded_at`` and audit rows; ``adapter`` carries listeners for new facts.
    """

    _pragmas = (f"PRAGMA cache_size={CACHE_KIB}",)
    _tables = TABLES

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], datetime] = utc_now,
        adapter: ProvenanceAdapter | None = None,
    ) -> None:
        super().__init__(path, clock=clock)
        self.adapter = adapter if adapter is not None else ProvenanceAdapter()
        self._checkpointer: aiosqlite.Connection | None = None
        self._checkpointing: asyncio.Task[None] | None = None
        self._background_users = 0
        self._background_lock = asyncio.Lock()
        self._deferred = False
        """The connection's own checkpoints are off (``wal_autocheckpoint=0``)."""

    async def close(self) -> None:
        """Close the connection (a later call reopens it), after any background checkpoint."""
        try:
            async with self._lock:
                await self._settle()
                self._deferred = False
        finally:
            await super().close()

    @asynccontextmanager
    async def background_checkpoints(self) -> AsyncIterator[None]:
        """While open, commits leave the write-ahead log to a second connection.

        Normally the commit that fills the log copies it into the database (a checkpoint,
        mostly waiting for the disk to sync). Inside this context a batch's commit returns
        at once, the checkpoint runs on another connection while the caller goes on (e.g.
        decoding its next batch), and the next batch waits for it before it begins, so
        the log still restarts after every batch. On leaving, the last checkpoint is
        awaited and commits checkpoint for themselves again. For long runs of big batches;
        entering does not wait for a batch being applied.
        """
        async with self._background_lock:
            if self._checkpointer is None:
                self._checkpointer = await open_connection(self.path)
            self._background_users += 1
        try:
            yield
        finally:
            async with self._background_lock:
                self._background_users -= 1
                if self._background_users == 0:
                    async with self._lock:
                        checkpointer, self._checkpointer = self._checkpointer, None
                        try:
                            await self._settle()
                        finally:
                            if checkpointer is not None:
                                await checkpointer.close()
                            if self._deferred and self._db is not None:
                                await self._checkpoint_mode(self._db)

    async def _checkpoint_mode(self, db: aiosqlite.Connection) -> None:
        """Commits checkpoint for themselves unless a background checkpointer is open."""
        deferred = self._checkpointer is not None
        if deferred != self._deferred:
            pages = 0 if deferred else WAL_AUTOCHECKPOINT_PAGES
            await db.execute(f"PRAGMA wal_autocheckpoint={pages}")
            self._deferred = deferred

    async def _settle(self) -> None:
        """Wait for the background checkpoint, if one runs (its error is raised here)."""
        task, self._checkpointing = self._checkpointing, None
        if task is not None:
            await task

    async def _checkpoint(self, checkpointer: aiosqlite.Connection) -> None:
        await checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    async def _bootstrap(self, db: aiosqlite.Connection) -> None:
        """Create the schema, or migrate a version 1 or 2 file (one transaction either way)."""
        async with transaction(db):
            version = await _stored_version(db)
            steps = {1: (*_MIGRATE_V1, *_MIGRATE_V2), 2: _MIGRATE_V2}
            if version in steps:
                for statement in steps[version]:
                    await db.execute(statement)
            elif version is not None and version != SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: fact store schema version {version} is not supported "
                    f"(this version reads {SCHEMA_VERSION} and migrates 1 and 2)",
                    schema_version=version,
                )
            for statement in _SCHEMA:
                await db.execute(statement)

    async def _check_schema(self, db: aiosqlite.Connection, why: str) -> None:
        """A read-only file must hold this version's schema: it cannot be migrated."""
        await super()._check_schema(db, why)
        version = await _stored_version(db)
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: fact store schema version {version} cannot be read while the "
                f"file is read-only ({why}); this version reads {SCHEMA_VERSION}",
                schema_version=version,
            )

    async def _figures(self, db: aiosqlite.Connection) -> dict[str, Any]:
        version = await scalar(db, "SELECT value FROM fact_store_meta WHERE key = 'schema_version'")
        return {
            "schema_version": None if version is None else int(version),
            "fact_count": await scalar(db, "SELECT count(*) FROM facts"),
        }

    async def migrate(self, plan: MigrationPlan) -> None:
        """Apply nullable ``add_column`` operations to this store's tables, as the memory
        store does (one transaction, recorded by name in ``fact_store_migrations``)."""
        check_plan(plan, store="fact", tables=TABLES)
        now_us = self._now_us()
        async with self._write() as db:
            await apply_plan(db, plan, store="fact", ledger=_LEDGER, now_us=now_us)

    # --- writes -------------------------------------------------------------------------

    async def apply_delta(self, delta: DeltaInput, *, pack_hash: str = "") -> ApplyResult:
        """Apply one delta (see :meth:`apply_deltas`)."""
        return await self.apply_deltas([delta], pack_hash=pack_hash)

    async def apply_deltas(
        self,
        deltas: Sequence[DeltaInput],
        *,
        pack_hash: str = "",
        watermarks: Sequence[WatermarkAdvance] = (),
        rejections: Sequence[Rejection] = (),
        runs: Sequence[RuleRun] = (),
        version_of: Partition | None = None,
        basis: PassBasis | None = None,
    ) -> ApplyResult:
        """Apply a batch in order, in one transaction, with its watermarks and rejections.

        Deltas already in the audit table are skipped. Any error (validation, conflict,
        a watermark going backwards, a listener raising) rolls the whole batch back.
        ``runs`` (a scheduler's pass records) are written first, as a compare-and-set:
        another scheduler's earlier pass raises :class:`PassConflictError` and rolls back.
        With ``basis`` (a consolidation pass), the stored watermarks and facts version are
        first compared with what the pass read: a change raises :class:`StalePassError`.
        """
        check_pack_hash(pack_hash)
        with gc_paused():
            return await self._apply(
                validate_deltas(deltas),
                pack_hash,
                tuple(watermarks),
                tuple(rejections),
                runs,
                version_of,
                basis,
            )

    async def _apply(
        self,
        deltas: list[Delta],
        pack_hash: str,
        watermarks: tuple[WatermarkAdvance, ...],
        rejections: tuple[Rejection, ...],
        runs: Sequence[RuleRun] = (),
        version_of: Partition | None = None,
        basis: PassBasis | None = None,
    ) -> ApplyResult:
        now = self._clock()
        async with self._lock:
            db = await self._ready()
            await self._settle()
            await self._checkpoint_mode(db)
            batch = _Batch(db, self.adapter, pack_hash, now)
            if basis is not None:
                _check_pass_scope(deltas, basis)
                batch.check_sources = False
            try:
                async with transaction(db):
                    if basis is not None:
                        await _check_basis(db, basis)
                    await record_runs(db, runs)
                    deltas = await resolve_scopes(db, deltas)
                    for start in range(0, len(deltas), CHUNK):
                        await batch.apply_chunk(start, deltas[start : start + CHUNK])
                    advanced = await batch.advance(watermarks)
                    await batch.reject(rejections)
                    version = None if version_of is None else await _version(db, version_of)
            finally:
                self.adapter.discard()
            if self._deferred and self._checkpointer is not None:
                self._checkpointing = asyncio.create_task(self._checkpoint(self._checkpointer))
        return batch.result(advanced, len(rejections), version)

    async def claim_partition(
        self, partition: Partition, holder: str, seconds: float
    ) -> str | None:
        """Claim ``partition`` for ``holder`` for ``seconds`` (renewing a claim it holds).

        Returns None when the claim is ours, else the other holder's name. An expired
        claim, or one held by a process of this host that no longer runs, is taken over.
        """
        now_us = to_us(utc_now(), "claim time")
        async with self._write() as db:
            other = await _other_claim(db, partition.key, holder, now_us)
            if other is not None:
                return other
            await db.execute(
                "INSERT INTO partition_claims (partition_key, holder, expires_us) "
                "VALUES (?, ?, ?) ON CONFLICT (partition_key) DO UPDATE SET "
                "holder = excluded.holder, expires_us = excluded.expires_us",
                (partition.key, holder, now_us + seconds_us(seconds)),
            )
        return None

    async def release_partition(self, partition: Partition, holder: str) -> None:
        """Give up ``holder``'s claim on ``partition`` (nothing if it holds none)."""
        async with self._write() as db:
            await db.execute(_DROP_CLAIM, (partition.key, holder))

    async def basis(self, pack: str, partition: Partition) -> tuple[dict[str, int], int]:
        """The pack's watermarks for ``partition`` and the partition's facts version, read
        before a pass reads episodes and facts (see :class:`PassBasis`)."""
        async with self._read() as db:
            version = await _version(db, partition)
            return await _marks(db, pack, partition.key), version

    async def version(self, partition: Partition) -> int:
        """A number that changes whenever ``partition``'s facts do: its highest audit seq
        (every change to facts, reinforcements included, writes an audit row)."""
        async with self._read() as db:
            return await _version(db, partition)

    # --- reads --------------------------------------------------------------------------

    async def query(self, pattern: FactPattern) -> list[Fact]:
        """Facts matching ``pattern`` (current only unless ``include_history``)."""
        sql, params = fact_query(pattern)
        async with self._read() as db:
            rows = await fetch(db, sql, params)
        return [fact_from_row(row) for row in rows]

    async def as_of(self, t: datetime, pattern: FactPattern | None = None) -> list[Fact]:
        """Facts valid at ``t`` (``valid_from <= t < valid_until``); naive ``t`` is refused."""
        sql, params = fact_query(pattern or FactPattern(), as_of_us=to_us(t, "as_of time"))
        async with self._read() as db:
            rows = await fetch(db, sql, params)
        return [fact_from_row(row) for row in rows]

    async def search(
        self,
        query: str = "",
        *,
        user: str | None = None,
        agent: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        min_confidence: float | None = None,
        limit: int = 10,
        touch: bool = True,
        include_history: bool = False,
    ) -> list[FactHit]:
        """Current facts matching any word of ``query``, best first, and the filters.

        Words are matched in subject, predicate, object and payload (case and accents
        ignored); an empty query searches by the filters alone, by confidence. With
        ``include_history``, closed facts are searched too. With ``touch`` (the default)
        each returned fact's access count and last access are recorded (see
        :meth:`access`) in the same call; ``touch=False`` reads without a trace and works
        on a read-only file.
        """
        match = match_expression(query)
        where, params = _pattern_filter(
            search_pattern(user, agent, subject, predicate, min_confidence)
        )
        sql, args = search_query(
            match,
            where,
            params,
            _FACT_COLUMNS,
            check_limit(limit),
            include_history=include_history,
        )
        if not touch:
            async with self._read() as db:
                rows = await fetch(db, sql, args)
            return _hits(rows)
        async with self._write() as db:
            rows = await fetch(db, sql, args)
            now_us = self._now_us()
            await db.executemany(TOUCH, [(row[0], now_us) for row in rows])
        return _hits(rows)

    async def access(self, fact_id: str) -> FactAccess:
        """How often ``fact_id`` was read by access-recording reads, and when last."""
        async with self._read() as db:
            rows = await fetch(
                db,
                "SELECT f.id, a.count, a.last_access_us FROM facts f "
                "LEFT JOIN fact_access a ON a.fact_id = f.id WHERE f.id = ?",
                (fact_id,),
            )
        if not rows:
            raise FactNotFoundError(f"no fact with id {fact_id!r}", fact_id=fact_id)
        _, count, last_us = rows[0]
        return FactAccess(
            fact_id=fact_id,
            count=count or 0,
            last_access=None if last_us is None else from_us(last_us),
        )

    async def get(self, fact_id: str) -> Fact:
        """One fact by id, current or closed; :class:`FactNotFoundError` if unknown."""
        async with self._read() as db:
            rows = await fetch(db, f"SELECT {_FACT_COLUMNS} FROM facts WHERE id = ?", (fact_id,))
        if not rows:
            raise FactNotFoundError(f"no fact with id {fact_id!r}", fact_id=fact_id)
        return fact_from_row(rows[0])

    async def lineage(self, fact_id: str) -> ProvenanceBundle:
        """The provenance bundle recorded with a fact."""
        async with self._read() as db:
            return await self._lineage(db, fact_id)

    @staticmethod
    async def _lineage(db: aiosqlite.Connection, fact_id: str) -> ProvenanceBundle:
        rows = await fetch(
            db,
            f"SELECT {_LINEAGE_COLUMNS} FROM lineage "
            "WHERE rowid = (SELECT rowid FROM facts WHERE id = ?1) AND fact_id = ?1",
            (fact_id,),
        )
        if not rows:
            raise FactNotFoundError(f"no lineage for fact id {fact_id!r}", fact_id=fact_id)
        return bundle_from_row(fact_id, rows[0])

    async def current_facts(self, partition: Partition) -> list[EngineFact]:
        """The partition's current facts for the consolidation runtime (no pydantic)."""
        async with self._read() as db:
            rows = await fetch(db, _CURRENT, (partition.key,))
        return [engine_fact(row) for row in rows]

    async def watermark(self, pack: str, rule_id: str, partition: Partition) -> int:
        """Last consolidated episode seq for (pack, rule, partition); 0 when none."""
        async with self._read() as db:
            seq = await scalar(
                db,
                "SELECT last_seq FROM watermarks WHERE pack = ? AND rule_id = ? "
                "AND partition_key = ?",
                (pack, rule_id, partition.key),
            )
        return 0 if seq is None else int(seq)

    async def watermarks(self, pack: str, partition: Partition) -> dict[str, int]:
        """Every rule's watermark for (pack, partition), by rule id."""
        async with self._read() as db:
            return await _marks(db, pack, partition.key)

    async def audit_rows(self, partition: Partition | None = None) -> list[AuditRow]:
        """Applied deltas in application order, optionally for one partition."""
        where, params = ("WHERE partition_key = ?", (partition.key,)) if partition else ("", ())
        async with self._read() as db:
            rows = await fetch(
                db, f"SELECT {_AUDIT_COLUMNS} FROM audit {where} ORDER BY seq", params
            )
        return [audit_from_row(row) for row in rows]

    async def rejections(self, partition: Partition | None = None) -> list[Rejection]:
        """Recorded rejections, oldest first, optionally for one partition."""
        where, params = ("WHERE partition_key = ?", (partition.key,)) if partition else ("", ())
        async with self._read() as db:
            rows = await fetch(
                db,
                "SELECT id, pack, rule_id, user, agent, reason, at_us FROM rejections "
                f"{where} ORDER BY at_us, id, pack, rule_id, partition_key",
                params,
            )
        return [
            Rejection(
                id=rid,
                pack=pack,
                rule_id=rule_id,
                partition=Partition(user, agent),
                reason=reason,
                at=from_us(at_us),
            )
            for rid, pack, rule_id, user, agent, reason, at_us in rows
        ]

    async def explain(self, fact_id: str) -> Explanation:
        """Rule, pack hash, reason, bindings, source episodes, supersession chain, audit."""
        async with self._read() as db:
            rows = await fetch(
                db, f"SELECT {_FACT_COLUMNS}, closed_by FROM facts WHERE id = ?", (fact_id,)
            )
            if not rows:
                raise FactNotFoundError(f"no fact with id {fact_id!r}", fact_id=fact_id)
            fact, closed_by = fact_from_row(rows[0]), rows[0][14]
            provenance = await self._lineage(db, fact_id)
            return Explanation(
                fact=fact,
                provenance=provenance,
                source_episodes=await _source_episodes(
                    db, provenance.source_episode_ids, _partition_key(fact.user, fact.agent)
                ),
                predecessors=tuple(await _predecessors(db, provenance.predecessor_ids)),
                successors=tuple(await _successors(db, fact)),
                closed_by=closed_by,
                audit=tuple(await _audit_touching(db, fact, closed_by)),
            )

    # --- many partitions at once (batched passes) ----------------------------------------

    async def pass_bases(
        self, pack: str, partitions: Sequence[Partition]
    ) -> list[tuple[dict[str, int], int]]:
        """:meth:`basis` of every partition (in the order given), in one statement."""
        async with self._read() as db:
            states = await _states_of(db, pack, [p.key for p in partitions])
        return [(marks, version) for marks, version, _, _ in states]

    async def current_facts_of(self, partitions: Sequence[Partition]) -> list[list[EngineFact]]:
        """:meth:`current_facts` of every partition (in the order given), in one statement."""
        keys = [p.key for p in partitions]
        found: dict[str, list[EngineFact]] = {key: [] for key in keys}
        async with self._read() as db:
            rows = await fetch(db, _CURRENT_OF, (orjson.dumps(keys),))
        for row in rows:
            found[row[-1]].append(engine_fact(row))
        return [found[key] for key in keys]

    async def apply_passes(
        self, passes: Sequence[PassWrite], *, pack_hash: str = ""
    ) -> list[int | None]:
        """Apply many partitions' passes in one transaction (group commit).

        Each pass's basis is checked as :meth:`apply_deltas` does; a pass whose partition
        changed, or that another holder claims, is left out (``None``: compute it again),
        the others are applied. Returns each applied partition's facts version after it.
        Any other error (validation, conflict, a run another scheduler applied first) rolls
        every pass back.
        """
        check_pack_hash(pack_hash)
        with gc_paused():
            checked = [_checked_deltas(p) for p in passes]
            now = self._clock()
            async with self._lock:
                db = await self._ready()
                await self._settle()
                await self._checkpoint_mode(db)
                batch = _Batch(db, self.adapter, pack_hash, now)
                batch.check_sources = False
                try:
                    async with transaction(db):
                        fresh = await _fresh_passes(db, passes)
                        kept = [p for p, ok in zip(passes, fresh, strict=True) if ok]
                        await record_runs(db, [run for p in kept for run in p.runs])
                        deltas = await resolve_scopes(
                            db, [d for ds, ok in zip(checked, fresh, strict=True) if ok for d in ds]
                        )
                        for start in range(0, len(deltas), CHUNK):
                            await batch.apply_chunk(start, deltas[start : start + CHUNK])
                        await _advance_passes(db, kept, batch.now_us)
                        await batch.reject([r for p in kept for r in p.rejections])
                        versions = await _versions_after(db, kept, batch, len(deltas))
                finally:
                    self.adapter.discard()
                if self._deferred and self._checkpointer is not None:
                    self._checkpointing = asyncio.create_task(self._checkpoint(self._checkpointer))
        return [
            versions[p.basis.partition.key] if ok else None
            for p, ok in zip(passes, fresh, strict=True)
        ]


def _checked_deltas(write: PassWrite) -> list[Delta]:
    """``write``'s deltas validated, all within its own partition."""
    deltas = validate_deltas(write.deltas)
    _check_pass_scope(deltas, write.basis)
    return deltas


@dataclass(frozen=True, slots=True)
class PassWrite:
    """One computed pass for :meth:`SQLiteFactStore.apply_passes`: what it read (``basis``,
    without a claim holder) and what it writes."""

    basis: PassBasis
    deltas: Sequence[DeltaInput] = ()
    watermarks: Sequence[WatermarkAdvance] = ()
    rejections: Sequence[Rejection] = ()
    runs: Sequence[RuleRun] = ()


_CURRENT_OF: Final = """
    SELECT f.id, f.subject, f.predicate, f.object, f.confidence, f.valid_from_us,
        max(f.valid_from_us, coalesce(
            (SELECT max(r.ts_us) FROM reinforcements r WHERE r.fact_id = f.id), f.valid_from_us)),
        f.rule_id, l.source_episode_ids, f.partition_key
    FROM facts f JOIN lineage l ON l.rowid = f.rowid
    WHERE f.partition_key IN (SELECT value FROM json_each(?)) AND f.valid_until_us IS NULL
    ORDER BY f.partition_key, f.valid_from_us, f.id"""
_VERSIONS_OF: Final = """
    SELECT j.value, (SELECT max(a.seq) FROM audit a WHERE a.partition_key = j.value)
    FROM json_each(?) j"""
_STATES_OF: Final = """
    SELECT (SELECT max(a.seq) FROM audit a WHERE a.partition_key = j.value),
        (SELECT json_group_object(w.rule_id, w.last_seq) FROM watermarks w
            WHERE w.pack = ?1 AND w.partition_key = j.value),
        c.holder, c.expires_us
    FROM json_each(?2) j LEFT JOIN partition_claims c ON c.partition_key = j.value
    ORDER BY j.key"""


async def _versions_of(db: aiosqlite.Connection, keys: Sequence[str]) -> dict[str, int]:
    """Facts version (see :meth:`SQLiteFactStore.version`) of each partition key."""
    rows = await fetch(db, _VERSIONS_OF, (orjson.dumps(list(keys)),))
    return {str(key): 0 if seq is None else int(seq) for key, seq in rows}


async def _states_of(
    db: aiosqlite.Connection, pack: str, keys: Sequence[str]
) -> list[tuple[dict[str, int], int, str | None, int]]:
    """Per partition key (in order): the pack's watermarks, the facts version, and the
    partition's claim holder and expiry (None, 0: unclaimed), in one statement."""
    rows = await fetch(db, _STATES_OF, (pack, orjson.dumps(list(keys))))
    return [
        (
            {str(k): int(v) for k, v in orjson.loads(marks).items()},
            0 if version is None else int(version),
            None if holder is None else str(holder),
            0 if expires_us is None else int(expires_us),
        )
        for version, marks, holder, expires_us in rows
    ]


async def _fresh_passes(db: aiosqlite.Connection, passes: Sequence[PassWrite]) -> list[bool]:
    """Per pass: whether its partition is as it read it and nobody else claims it (an
    expired or dead claim is cleared, as :func:`_other_claim` does); one statement per
    pack."""
    fresh = [False] * len(passes)
    for pack in dict.fromkeys(p.basis.pack for p in passes):
        mine = [i for i, p in enumerate(passes) if p.basis.pack == pack]
        keys = [passes[i].basis.partition.key for i in mine]
        for i, (marks, version, holder, expires_us) in zip(
            mine, await _states_of(db, pack, keys), strict=True
        ):
            basis = passes[i].basis
            claimed = holder not in (None, basis.holder) and expires_us > basis.now_us
            if holder is not None and (not claimed or _holder_is_dead(holder)):
                await db.execute(_DROP_CLAIM, (basis.partition.key, holder))
                claimed = False
            fresh[i] = not claimed and version == basis.version and marks == basis.marks
    return fresh


async def _versions_after(
    db: aiosqlite.Connection, kept: Sequence[PassWrite], batch: _Batch, deltas: int
) -> dict[str, int]:
    """Facts version of each applied pass's partition; for a single pass it is known
    without a read: the last audit seq the batch wrote, or the basis version if none."""
    if len(kept) != 1:
        return await _versions_of(db, [p.basis.partition.key for p in kept])
    basis = kept[0].basis
    return {basis.partition.key: batch._seq if deltas > batch.skipped else basis.version}


async def _advance_passes(
    db: aiosqlite.Connection, passes: Sequence[PassWrite], now_us: int
) -> None:
    """Move the passes' watermarks forward from the marks their bases checked; a step
    backwards raises :class:`StoreError`."""
    final: dict[tuple[str, str, str], int] = {}
    for write in passes:
        for index, adv in enumerate(write.watermarks):
            key = (adv.pack, adv.rule_id, adv.partition.key)
            prior = final.get(key, write.basis.marks.get(adv.rule_id, 0))
            if adv.pack != write.basis.pack or adv.partition != write.basis.partition:
                raise StoreError(
                    f"watermarks[{index}]: {adv.pack}/{adv.rule_id} at {key[2]} is outside "
                    f"the pass over {write.basis.pack} at {write.basis.partition.key}",
                    index=index,
                )
            if adv.last_seq < prior:
                raise StoreError(
                    f"watermarks[{index}]: {adv.pack}/{adv.rule_id} at {key[2]} would go "
                    f"backwards from {prior} to {adv.last_seq}",
                    index=index,
                    stored=prior,
                    requested=adv.last_seq,
                )
            final[key] = adv.last_seq
    rows = [(*key, seq, now_us) for key, seq in final.items()]
    if rows:
        await db.executemany(_UPSERT_WATERMARK, rows)
