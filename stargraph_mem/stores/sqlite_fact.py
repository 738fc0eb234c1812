"""Promoted facts over SQLite (aiosqlite), with provenance, audit, watermarks and history.

Update and delete close a fact's validity (``valid_until_us``, ``superseded_by``,
``closed_by``); rows are never deleted. A batch of deltas, its watermark advances and its
rejections are applied in one ``BEGIN IMMEDIATE`` transaction with ``executemany``
per table and chunk (:class:`~stargraph_mem.stores.fact_apply.Batch`, shared with the
PostgreSQL store), so a failure anywhere leaves the file exactly as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Final

import aiosqlite

from stargraph_mem.errors import FactNotFoundError, StoreError
from stargraph_mem.gcpause import gc_paused
from stargraph_mem.model.facts import Fact, FactAccess, FactHit, FactPattern, StatusEvent
from stargraph_mem.model.time import from_us, seconds_us, to_us, utc_now
from stargraph_mem.stores.aggregates import AggregateRow, AggregateWindow, AggregateWrite
from stargraph_mem.stores.fact import (
    ApplyResult,
    AuditRow,
    DeltaInput,
    EngineFact,
    Explanation,
    ProvenanceAdapter,
    ProvenanceBundle,
    Rejection,
    WatermarkAdvance,
    check_pack_hash,
)
from stargraph_mem.stores.fact_apply import (
    Batch,
    marks,
    other_claim,
    version,
)
from stargraph_mem.stores.fact_explain import explain, lineage_of
from stargraph_mem.stores.fact_passes import (
    CHUNK,
    RecordRuns,
    aggregates_in,
    apply_batch,
    apply_passes_in,
    checked_deltas,
    claim_many,
    group_current,
    marks_of,
    versions_of,
)
from stargraph_mem.stores.fact_rows import (
    Delta,
    PassBasis,
    PassWrite,
    audit_from_row,
    claim_holder,
    engine_fact,
    fact_from_row,
    hits,
    pattern_filter,
    rejection_from_row,
    validate_deltas,
    with_provenance,
)
from stargraph_mem.stores.fact_rows import fact_query as dialect_query
from stargraph_mem.stores.fact_status import (
    ARCHIVED,
    pin_fact,
    restore_in,
    status_history,
    unpin_fact,
)
from stargraph_mem.stores.models import MigrationPlan
from stargraph_mem.stores.pass_time import Deferral, deferred_of
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.search_common import check_fact_id, check_fact_ids, check_known
from stargraph_mem.stores.sqlite_base import (
    WAL_AUTOCHECKPOINT_PAGES,
    SharedConnection,
    SQLiteConn,
    SQLiteStoreBase,
    fetch,
    open_connection,
    scalar,
    transaction,
)
from stargraph_mem.stores.sqlite_fact_schema import (
    CACHE_KIB,
    CURRENT,
    LEDGER,
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    SQLITE,
    TABLES,
    stored_version,
)
from stargraph_mem.stores.sqlite_migration import apply_plan, check_plan
from stargraph_mem.stores.sqlite_schedule import RuleRun, record_runs
from stargraph_mem.stores.sqlite_search import (
    TOUCH,
    catch_up_text,
    check_limit,
    match_expression,
    search_pattern,
    search_query,
    text_behind,
    text_copy,
)
from stargraph_mem.stores.sweep_reads import sweep_candidates, sweep_facts, sweep_partitions
from stargraph_mem.stores.sweep_schema import DROP_SWEEP_INDEXES, ON_DEMAND_MARK, to_make

__all__ = [
    "CHUNK",
    "SCHEMA_VERSION",
    "PassBasis",
    "PassWrite",
    "SQLiteFactStore",
    "claim_holder",
    "fact_from_row",
    "fact_query",
    "validate_deltas",
]


def fact_query(pattern: FactPattern, *, as_of_us: int | None = None) -> tuple[str, list[Any]]:
    """The SQLite SQL and parameters of ``query`` (or of ``as_of`` with ``as_of_us``)."""
    return dialect_query(SQLITE, pattern, as_of_us=as_of_us)


class SQLiteFactStore(SQLiteStoreBase):
    """The :class:`~stargraph_mem.stores.fact.FactStore` over one SQLite file.

    By default the same file as the episode store. ``clock`` (tz-aware) stamps
    ``recorded_at`` and audit rows; ``adapter`` carries listeners for new facts.
    """

    _pragmas = (f"PRAGMA cache_size={CACHE_KIB}",)
    _tables = TABLES
    _store_name = "fact"

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], datetime] = utc_now,
        adapter: ProvenanceAdapter | None = None,
        shared: SharedConnection | None = None,
    ) -> None:
        super().__init__(path, clock=clock, shared=shared)
        self.adapter = adapter if adapter is not None else ProvenanceAdapter()
        self._checkpointer: aiosqlite.Connection | None = None
        self._checkpointing: asyncio.Task[None] | None = None
        self._background_users = 0
        self._background_lock = asyncio.Lock()
        self._deferred = False
        self._episodes_here: bool | None = None
        """Whether this file holds the episodes (learnt by the first write)."""
        self._indexed: set[str] = set()
        """Sweep indexes made (or found made) through this store."""
        """The connection's own checkpoints are off (``wal_autocheckpoint=0``)."""

    async def close(self) -> None:
        """Close the connection (a later call reopens it), after any background checkpoint;
        the search index is brought up to date first, so a file at rest has every fact
        indexed (should that fail, the next search indexes them)."""
        try:
            async with self._lock:
                await self._settle()
                self._deferred = False
                db = self._db
                if db is not None and self.read_only_reason is None:
                    with contextlib.suppress(sqlite3.Error, StoreError):
                        if await text_behind(db) is not None:
                            async with transaction(db):
                                await catch_up_text(db)
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
        """Create the schema, or migrate a file of an older version (one transaction either
        way)."""
        async with transaction(db):
            version = await stored_version(db)
            if version in MIGRATIONS:
                for statement in MIGRATIONS[version]:
                    await db.execute(statement)
            elif version is not None and version != SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: fact store schema version {version} is not supported "
                    f"(this version reads {SCHEMA_VERSION} and migrates 1 to {SCHEMA_VERSION - 1})",
                    schema_version=version,
                )
            for statement in SCHEMA:
                await db.execute(statement)
            await _sweep_indexes_on_demand(db)
            await self._stamp_if_complete(db)

    async def _required_tables(self, db: aiosqlite.Connection) -> tuple[str, ...]:
        """Every table at this version; the tables migrations read at older ones."""
        version = await stored_version(db)
        return TABLES if version is None or version >= SCHEMA_VERSION else _OLDEST_TABLES

    async def _check_schema(self, db: aiosqlite.Connection, why: str) -> None:
        """A read-only file must hold this version's schema: it cannot be migrated."""
        await super()._check_schema(db, why)
        version = await stored_version(db)
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
            await apply_plan(db, plan, store="fact", ledger=LEDGER, now_us=now_us)

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
        aggregates: Sequence[AggregateWrite] = (),
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
                aggregates,
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
        aggregates: Sequence[AggregateWrite] = (),
    ) -> ApplyResult:
        async with self._applying(pack_hash) as (conn, batch, record):
            return await apply_batch(
                conn,
                SQLITE,
                batch,
                deltas,
                watermarks=watermarks,
                rejections=rejections,
                runs=runs,
                version_of=version_of,
                basis=basis,
                record=record,
                aggregates=aggregates,
            )

    @asynccontextmanager
    async def _applying(
        self, pack_hash: str
    ) -> AsyncIterator[tuple[SQLiteConn, Batch, RecordRuns]]:
        """The connection in a write transaction, a batch on it and the run recorder; the
        adapter's staged facts are dropped afterwards, and a background checkpoint starts
        when one is wanted."""
        now = self._clock()
        async with self._lock:
            db = await self._ready()
            await self._settle()
            await self._checkpoint_mode(db)
            conn = SQLiteConn(db)
            try:
                async with transaction(db):
                    batch = Batch(conn, SQLITE, self.adapter, pack_hash, now, self._episodes_here)
                    yield conn, batch, partial(record_runs, db)
                    self._episodes_here = batch.episodes_here
            finally:
                self.adapter.discard()
            if self._deferred and self._checkpointer is not None:
                self._checkpointing = asyncio.create_task(self._checkpoint(self._checkpointer))

    async def claim_partition(
        self, partition: Partition, holder: str, seconds: float
    ) -> str | None:
        """Claim ``partition`` for ``holder`` for ``seconds`` (renewing a claim it holds).

        Returns None when the claim is ours, else the other holder's name. An expired
        claim, or one held by a process of this host that no longer runs, is taken over.
        """
        now_us = to_us(utc_now(), "claim time")
        async with self._write() as db:
            other = await other_claim(SQLiteConn(db), SQLITE, partition.key, holder, now_us)
            if other is not None:
                return other
            await db.execute(
                SQLITE.put_claim, (partition.key, holder, now_us + seconds_us(seconds))
            )
        return None

    async def claim_partitions(
        self, partitions: Sequence[Partition], holder: str, seconds: float
    ) -> list[Partition]:
        """Claim each of ``partitions`` for ``holder`` for ``seconds`` in one transaction;
        the ones now held (see :meth:`claim_partition`), in the order given."""
        now_us = to_us(utc_now(), "claim time")
        keys = [p.key for p in partitions]
        async with self._write() as db:
            held = await claim_many(
                SQLiteConn(db), SQLITE, keys, holder, now_us, now_us + seconds_us(seconds)
            )
        return [p for p in partitions if p.key in held]

    async def release_partitions(self, partitions: Sequence[Partition], holder: str) -> None:
        """Give up ``holder``'s claims on ``partitions`` (those it holds)."""
        async with self._write() as db:
            await db.executemany(SQLITE.drop_claim, [(p.key, holder) for p in partitions])

    async def release_partition(self, partition: Partition, holder: str) -> None:
        """Give up ``holder``'s claim on ``partition`` (nothing if it holds none)."""
        async with self._write() as db:
            await db.execute(SQLITE.drop_claim, (partition.key, holder))

    async def basis(self, pack: str, partition: Partition) -> tuple[dict[str, int], int]:
        """The pack's watermarks for ``partition`` and the partition's facts version, read
        before a pass reads episodes and facts (see :class:`PassBasis`)."""
        async with self._read() as db:
            conn = SQLiteConn(db)
            now = await version(conn, SQLITE, partition)
            return await marks(conn, SQLITE, pack, partition.key), now

    async def version(self, partition: Partition) -> int:
        """A number that changes whenever ``partition``'s facts do: its highest audit seq
        (every change to facts, reinforcements included, writes an audit row)."""
        async with self._read() as db:
            return await version(SQLiteConn(db), SQLITE, partition)

    # --- reads --------------------------------------------------------------------------

    async def query(self, pattern: FactPattern) -> list[Fact]:
        """Facts matching ``pattern`` (current only unless ``include_history``), with their
        lineage and pin time (``Fact.lineage``, ``Fact.pinned_at``)."""
        sql, params = fact_query(pattern)
        return await self._facts(sql, params)

    async def as_of(self, t: datetime, pattern: FactPattern | None = None) -> list[Fact]:
        """Facts valid at ``t`` (``valid_from <= t < valid_until``); naive ``t`` is refused."""
        sql, params = fact_query(pattern or FactPattern(), as_of_us=to_us(t, "as_of time"))
        return await self._facts(sql, params)

    async def _facts(self, sql: str, params: Sequence[Any]) -> list[Fact]:
        """The facts ``sql`` selects, with their lineage and pin time (one read)."""
        async with self._read() as db:
            rows = await fetch(db, sql, params)
            return await with_provenance(SQLiteConn(db), SQLITE, [fact_from_row(r) for r in rows])

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

        The search index may trail the newest facts (see
        :mod:`~stargraph_mem.stores.sqlite_search`): a search first indexes them, in a
        write transaction, or on a read-only file searches its connection's own copy of
        the index, so every search sees every fact.
        """
        match = match_expression(query)
        where, params = pattern_filter(
            search_pattern(user, agent, subject, predicate, min_confidence)
        )
        shape = (match, where, params, SQLITE.fact_columns, check_limit(limit), include_history)
        sql, args = search_query(*shape)
        if not touch:
            async with self._read() as db:
                behind = await text_behind(db)
                if behind is None or self.read_only_reason is not None:
                    if behind is not None:  # see the facts the file's index lacks
                        sql, args = search_query(*shape, table=await text_copy(db))
                    return hits(await fetch(db, sql, args))
        async with self._write() as db:
            await catch_up_text(db)
            rows = await fetch(db, sql, args)
            if touch:
                now_us = self._now_us()
                await db.executemany(TOUCH, [(row[0], now_us) for row in rows])
        return hits(rows)

    async def record_access(self, fact_ids: Sequence[str], *, at: datetime | None = None) -> None:
        """Count one read of each fact at ``at`` (default: now): for reads made outside
        :meth:`search`, such as a fact an agent put in a prompt. All or nothing; an unknown
        id raises :class:`FactNotFoundError` and records nothing."""
        fact_ids = check_fact_ids(fact_ids)
        at_us = self._now_us() if at is None else to_us(at)
        async with self._write() as db:
            known = await fetch(db, *_known_ids(fact_ids))
            check_known(fact_ids, {str(row[0]) for row in known})
            await db.executemany(TOUCH, [(fid, at_us) for fid in fact_ids])

    async def access(self, fact_id: str) -> FactAccess:
        """How often ``fact_id`` was read by access-recording reads, and when last."""
        fact_id = check_fact_id(fact_id)
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
        fact_id = check_fact_id(fact_id)
        found = await self._facts(SQLITE.fact_by_id, (fact_id,))
        if not found:
            raise FactNotFoundError(f"no fact with id {fact_id!r}", fact_id=fact_id)
        return found[0]

    async def lineage(self, fact_id: str) -> ProvenanceBundle:
        """The provenance bundle recorded with a fact."""
        fact_id = check_fact_id(fact_id)
        async with self._read() as db:
            return await lineage_of(SQLiteConn(db), SQLITE, fact_id)

    async def current_facts(self, partition: Partition) -> list[EngineFact]:
        """The partition's current facts for the consolidation runtime (no pydantic)."""
        async with self._read() as db:
            rows = await fetch(db, CURRENT, (partition.key,))
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
            return await marks(SQLiteConn(db), SQLITE, pack, partition.key)

    async def audit_rows(self, partition: Partition | None = None) -> list[AuditRow]:
        """Applied deltas in application order, optionally for one partition."""
        where, params = ("WHERE partition_key = ?", (partition.key,)) if partition else ("", ())
        async with self._read() as db:
            rows = await fetch(
                db, f"SELECT {SQLITE.audit_columns} FROM audit {where} ORDER BY seq", params
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
        return [rejection_from_row(row) for row in rows]

    async def explain(self, fact_id: str) -> Explanation:
        """Rule, pack hash, reason, bindings, source episodes, supersession chain, audit
        and status history."""
        fact_id = check_fact_id(fact_id)
        async with self._read() as db:
            return await explain(SQLiteConn(db), SQLITE, fact_id)

    async def status_history(self, fact_id: str) -> list[StatusEvent]:
        """What happened to a fact, oldest first (see :class:`StatusEvent`)."""
        fact_id = check_fact_id(fact_id)
        async with self._read() as db:
            return await status_history(SQLiteConn(db), SQLITE, fact_id)

    # --- statuses and pins --------------------------------------------------------------

    async def pin(self, fact: str | Fact, *, reason: str = "") -> bool:
        """Pin a current fact (sweeps leave it alone); False when it was pinned already.
        A closed or unknown fact raises and changes nothing. ``fact`` is its id or, as in
        stargraph 0.8, the :class:`Fact` itself (read from this store: facts enter only
        through deltas)."""
        fact_id = check_fact_id(fact.id if isinstance(fact, Fact) else fact)
        now_us = self._now_us()
        async with self._write() as db:
            return await pin_fact(SQLiteConn(db), SQLITE, fact_id, now_us, reason)

    async def unpin(self, fact_id: str, *, reason: str = "") -> bool:
        """Unpin a current fact; False when it was not pinned."""
        fact_id = check_fact_id(fact_id)
        now_us = self._now_us()
        async with self._write() as db:
            return await unpin_fact(SQLiteConn(db), SQLITE, fact_id, now_us, reason)

    async def restore(self, fact_id: str, *, reason: str = "") -> Fact:
        """Make an archived fact current again as a new fact (same statement, payload and
        confidence; it keeps the archived one's reinforcement, access and pin); the
        archived fact stays closed. Returns the new fact."""
        fact_id = check_fact_id(fact_id)
        async with self._applying("") as (conn, batch, _):
            return await restore_in(conn, SQLITE, batch, fact_id, reason)

    # --- many partitions at once (batched passes) ----------------------------------------

    async def pass_bases(
        self, pack: str, partitions: Sequence[Partition]
    ) -> list[tuple[dict[str, int], int]]:
        """:meth:`basis` of every partition (in the order given), in two statements."""
        keys = [p.key for p in partitions]
        async with self._read() as db:
            conn = SQLiteConn(db)
            versions = await versions_of(conn, SQLITE, keys)
            marks = await marks_of(conn, SQLITE, pack, keys)
        return [(marks.get(key, {}), versions[key]) for key in keys]

    async def aggregates_of(
        self, pack: str, refs: Sequence[str], window: AggregateWindow | None = None
    ) -> list[AggregateRow]:
        """The pack's durable aggregate rows with any of ``refs``, and those ``window``
        asks for (one statement)."""
        async with self._read() as db:
            return await aggregates_in(SQLiteConn(db), SQLITE, pack, refs, window)

    async def deferred_of(self, pack: str, partitions: Sequence[Partition]) -> list[list[Deferral]]:
        """The episodes passes of ``pack`` left for a later pass (stamped after their pass
        time), per partition in the order given, in one statement."""
        async with self._read() as db:
            return await deferred_of(SQLiteConn(db), SQLITE, pack, partitions)

    async def current_facts_of(self, partitions: Sequence[Partition]) -> list[list[EngineFact]]:
        """:meth:`current_facts` of every partition (in the order given), in one statement."""
        keys = [p.key for p in partitions]
        async with self._read() as db:
            rows = await fetch(db, SQLITE.current_of, (SQLITE.ids(keys),))
        return group_current(rows, keys)

    async def archived_facts_of(self, partitions: Sequence[Partition]) -> list[list[EngineFact]]:
        """The archived facts (never restored) of every partition, in the order given, with
        status ``archived``, in one statement."""
        keys = [p.key for p in partitions]
        async with self._read() as db:
            rows = await fetch(db, SQLITE.archived_of, (SQLITE.ids(keys),))
        return group_current(rows, keys, ARCHIVED)

    async def sweep_partitions(
        self, where: str, params: Sequence[Any], *, archived: bool = False
    ) -> list[Partition]:
        """Partitions with a current fact a sweep's pre-filter ``where`` selects."""
        async with self._read() as db:
            return await sweep_partitions(SQLiteConn(db), SQLITE, where, params, archived=archived)

    async def sweep_candidates(
        self, where: str, params: Sequence[Any], *, archived: bool = False
    ) -> dict[Partition, int]:
        """Per partition, how many facts a sweep's pre-filter ``where`` selects."""
        async with self._read() as db:
            return await sweep_candidates(SQLiteConn(db), SQLITE, where, params, archived=archived)

    async def sweep_facts(
        self, where: str, params: Sequence[Any], partitions: Sequence[Partition]
    ) -> list[list[EngineFact]]:
        """The current facts ``where`` selects in each of ``partitions``, in one statement."""
        async with self._read() as db:
            return await sweep_facts(SQLiteConn(db), SQLITE, where, params, partitions)

    async def ensure_sweep_indexes(self, names: Sequence[str]) -> None:
        """Create the sweep indexes ``names`` the file does not have yet (one transaction;
        a name already made through this store costs nothing)."""
        todo = to_make(names, self._indexed)
        if not todo:
            return
        async with self._write() as db:
            for _, statement in todo:
                await db.execute(statement)
        self._indexed.update(name for name, _ in todo)

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
            checked = [checked_deltas(p) for p in passes]
            async with self._applying(pack_hash) as (conn, batch, record):
                return await apply_passes_in(conn, SQLITE, batch, passes, checked, record)


async def _sweep_indexes_on_demand(db: aiosqlite.Connection) -> None:
    """Drop the sweep indexes a file made before they were made on demand has (once: the
    file is marked), so closes stop writing to those no sweep reads (see
    :mod:`~stargraph_mem.stores.sweep_schema`)."""
    if await scalar(db, _MARKED, (ON_DEMAND_MARK,)) is None:
        for statement in DROP_SWEEP_INDEXES:
            await db.execute(statement)
        await db.execute(_MARK, (ON_DEMAND_MARK,))


_OLDEST_TABLES: Final = ("fact_store_meta", "facts", "lineage", "audit")
"""The tables a fact store of any older version has (its migrations read them)."""
_MARKED: Final = "SELECT value FROM fact_store_meta WHERE key = ?"
_MARK: Final = "INSERT INTO fact_store_meta (key, value) VALUES (?, '1')"


def _known_ids(fact_ids: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The statement finding which of ``fact_ids`` exist (one ``?`` per id)."""
    marks = ", ".join("?" for _ in fact_ids) or "NULL"
    return f"SELECT id FROM facts WHERE id IN ({marks})", tuple(fact_ids)
