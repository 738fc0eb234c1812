"""Episodic memory over SQLite (aiosqlite): scoped writes, widening reads, incremental reads.

One ``episodes`` table ordered by an insertion ``seq``; scope keys come from
:mod:`stargraph_mem.stores.scope`, so every read is an index lookup or range scan, never
``LIKE``. Writes take ``BEGIN IMMEDIATE`` so several processes can share one file (WAL).

A row that cannot be decoded (written by an older version or by hand) never blocks a read:
reads skip it, note it once in the ``quarantine`` table and report it
(:class:`~stargraph_mem.stores.memory.QuarantinedRow`); the row itself is left as it is.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Final, cast

import aiosqlite
import orjson

from stargraph_mem.errors import StoreError
from stargraph_mem.model.deltas import MemoryDelta
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.limits import DEFAULT_LIMITS, Limits
from stargraph_mem.model.time import utc_now
from stargraph_mem.stores.episode_io import (
    Discarded,
    EpisodeStatements,
    EpisodeWriter,
    checked_reads,
    group_reads,
    put_rows,
    quarantine,
    read_recent,
    read_since,
)
from stargraph_mem.stores.episode_rows import (
    TABLE,
    NotUtf8,
    Row,
    check_limit,
    check_scope,
    dedupe_batch,
    duplicate_error,
    episode_row,
    key_of_partition,
    partition_of,
    quarantined_row,
    row_differences,
    row_record,
    scope_filter,
    split_rows,
    warn_quarantined,
)
from stargraph_mem.stores.memory import (
    CheckedRead,
    EpisodeRecord,
    QuarantinedRow,
    consolidation_hook,
)
from stargraph_mem.stores.models import ConsolidationRule, MigrationPlan
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_base import BUSY_TIMEOUT_MS as BUSY_TIMEOUT_MS  # re-export
from stargraph_mem.stores.sqlite_base import (
    NOT_HERE,
    SharedConnection,
    SQLiteConn,
    SQLiteStoreBase,
    fetch,
    fetch_rows,
    here,
    scalar,
    transaction,
)
from stargraph_mem.stores.sqlite_base import to_us as to_us  # re-export
from stargraph_mem.stores.sqlite_migration import Ledger, apply_plan, check_plan

__all__ = [
    "BASELINE_MIGRATION",
    "SCHEMA_VERSION",
    "EpisodeWriter",
    "SQLiteMemoryStore",
    "row_record",
    "scope_filter",
]

logger = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 1
"""Version of the schema :meth:`SQLiteMemoryStore.bootstrap` creates; migrations bump it."""
BASELINE_MIGRATION: Final = "0001_episodes"

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS episodes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT UNIQUE NOT NULL,
        scope_key TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        user TEXT NOT NULL,
        session TEXT NOT NULL,
        agent TEXT NOT NULL,
        ts_us INTEGER NOT NULL,
        tz_offset_s INTEGER NOT NULL,
        content TEXT NOT NULL,
        source_node TEXT,
        metadata BLOB NOT NULL,
        last_accessed_us INTEGER NULL,
        access_count INTEGER NOT NULL DEFAULT 0
    )""",
    # the specification's name for the scope index; files made before it get it on open
    "CREATE INDEX IF NOT EXISTS idx_episodes_scope_ts ON episodes (scope_key, ts_us, seq)",
    "DROP INDEX IF EXISTS episodes_scope_ts",
    "CREATE INDEX IF NOT EXISTS episodes_partition_seq ON episodes (partition_key, seq)",
    "CREATE INDEX IF NOT EXISTS episodes_partition_ts ON episodes (partition_key, ts_us, seq)",
    """CREATE TABLE IF NOT EXISTS schema_migrations (
        version INTEGER PRIMARY KEY,
        name TEXT UNIQUE NOT NULL,
        applied_at_us INTEGER NOT NULL,
        plan BLOB NOT NULL
    )""",
    # episodes rows reads could not decode; created on open, so older files gain it too
    """CREATE TABLE IF NOT EXISTS quarantine (
        seq INTEGER PRIMARY KEY,
        episode_id TEXT,
        partition_key TEXT,
        reason TEXT NOT NULL,
        at_us INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS quarantine_partition_seq ON quarantine (partition_key, seq)",
)
EPISODES_TABLE: Final = _SCHEMA[0]
"""The episodes table (``select`` clauses run over it, on a copy for other backends)."""
_LEDGER: Final = Ledger(
    "schema_migrations",
    "INSERT INTO schema_migrations (version, name, applied_at_us, plan) "
    "VALUES ((SELECT max(version) + 1 FROM schema_migrations), ?, ?, ?)",
)
_BASELINE_SQL: Final = (
    "INSERT OR IGNORE INTO schema_migrations (version, name, applied_at_us, plan) "
    "VALUES (?, ?, ?, ?)"
)

_WRITE_COLUMNS: Final = (
    "id, scope_key, partition_key, user, session, agent, ts_us, tz_offset_s, content, "
    "source_node, metadata"
)
_STORED_SEQ_SQL: Final = (
    f"SELECT seq, {_WRITE_COLUMNS} FROM episodes WHERE id IN (SELECT value FROM json_each(?))"
)
_STORED_SQL: Final = (
    f"SELECT {_WRITE_COLUMNS} FROM episodes WHERE id IN (SELECT value FROM json_each(?))"
)
_READ_COLUMNS: Final = (
    "seq, id, content, ts_us, tz_offset_s, source_node, user, session, agent, metadata, "
    "last_accessed_us, access_count"
)
_SINCE_SQL: Final = (
    f"SELECT {_READ_COLUMNS} FROM episodes WHERE partition_key = ? AND seq > ? ORDER BY seq LIMIT ?"
)
_BY_IDS_SQL: Final = (
    f"SELECT {_READ_COLUMNS} FROM episodes WHERE id IN (SELECT value FROM json_each(?)) "
    "ORDER BY seq"
)
_TOUCH_SQL: Final = (
    "UPDATE episodes SET last_accessed_us = ?, access_count = access_count + 1 WHERE seq = ?"
)
_NOTE_SQL: Final = (
    "INSERT OR IGNORE INTO quarantine (seq, episode_id, partition_key, reason, at_us) "
    "VALUES (?, ?, ?, ?, ?)"
)
_QUARANTINE_COLUMNS: Final = "seq, episode_id, partition_key, reason, at_us"
_NOTED_SQL: Final = (
    f"SELECT {_QUARANTINE_COLUMNS} FROM quarantine "
    "WHERE seq IN (SELECT value FROM json_each(?)) ORDER BY seq"
)
_ROW_KEYS_SQL: Final = (
    "SELECT seq, partition_key FROM episodes WHERE seq IN (SELECT value FROM json_each(?))"
)
_STATEMENTS: Final = EpisodeStatements(
    ids=orjson.dumps,
    insert=(
        f"INSERT INTO episodes ({_WRITE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (id) DO NOTHING"
    ),
    new_seqs="SELECT seq FROM episodes WHERE seq > ? ORDER BY seq",
    stored_seq_in=_STORED_SEQ_SQL,
    noted_in=_NOTED_SQL,
    row_keys_in=_ROW_KEYS_SQL,
)
_PARTITIONS_SQL: Final = """
    WITH RECURSIVE keys(k) AS (
        SELECT min(partition_key) FROM episodes
        UNION ALL
        SELECT (SELECT min(partition_key) FROM episodes WHERE partition_key > keys.k)
        FROM keys WHERE keys.k IS NOT NULL
    )
    SELECT k FROM keys WHERE k IS NOT NULL"""

# --- SQLite reads -------------------------------------------------------------------


def _lenient_text(data: bytes) -> str:
    """Text factory for re-reading rows whose TEXT is not UTF-8: such values come back as
    :class:`NotUtf8` (not a ``str``), so the row checks refuse them by type."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return NotUtf8(data)  # type: ignore[return-value]


async def _all(db: aiosqlite.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    """Every row of one statement; when reading fails part way the cursor is closed (an
    unfinished statement would keep a read snapshot open on the connection, and a later
    ``BEGIN IMMEDIATE`` on it would fail as busy)."""
    rows = here(db, fetch_rows, sql, params)
    if rows is not NOT_HERE:
        return cast(list[Any], rows)
    cursor = await db.execute(sql, params)
    try:
        return list(await cursor.fetchall())
    except BaseException:
        await cursor.close()
        raise


async def _rows(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """All rows of one statement, but a TEXT value that is not UTF-8 does not fail the
    read: the statement is run again with such values read as :class:`NotUtf8`."""
    try:
        return await _all(db, sql, params)
    except sqlite3.OperationalError as exc:
        if not str(exc).startswith("Could not decode to UTF-8"):
            raise
    factory = db.text_factory
    db.text_factory = _lenient_text
    try:
        return await _all(db, sql, params)
    finally:
        db.text_factory = factory


async def _note(db: aiosqlite.Connection, entries: list[QuarantinedRow], at_us: int) -> bool:
    """Insert quarantine entries (existing seqs are kept); False when the table cannot be
    written (a read-only file, a lock held too long, …). Inside a transaction a savepoint
    keeps a failure from undoing the rest of it."""
    params = [(e.seq, e.episode_id, e.partition_key, e.reason, at_us) for e in entries]
    try:
        if db.in_transaction:
            await db.execute("SAVEPOINT quarantine")
            try:
                await db.executemany(_NOTE_SQL, params)
            except sqlite3.Error:
                await db.execute("ROLLBACK TO quarantine")
                raise
            finally:
                await db.execute("RELEASE quarantine")
        else:
            async with transaction(db):
                await db.executemany(_NOTE_SQL, params)
    except (sqlite3.Error, StoreError) as exc:
        logger.warning("could not record %d quarantined episodes row(s): %s", len(params), exc)
        return False
    return True


def recent_query(
    user: str, session: str | None, agent: str | None, limit: int
) -> tuple[str, tuple[str | int, ...]]:
    """The SQL and parameters ``recent()`` runs (public so tests can EXPLAIN the real query)."""
    check_limit(limit)
    where, params = scope_filter(user, session, agent)
    sql = (
        f"SELECT {_READ_COLUMNS} FROM episodes WHERE {where} ORDER BY ts_us DESC, seq DESC LIMIT ?"
    )
    return sql, (*params, limit)


class _MemoryConn(SQLiteConn):
    """The shared episode code's connection: reads survive TEXT that is not UTF-8."""

    __slots__ = ()

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        return await _rows(self.db, sql, params)


async def _put_again(rows: Sequence[Any], db: aiosqlite.Connection) -> None:
    """Insert ``rows`` again (a put whose commit was rolled back with its record's pass)."""
    await put_rows(_MemoryConn(db), _STATEMENTS, rows)


# --- the store ------------------------------------------------------------------------


class SQLiteMemoryStore(SQLiteStoreBase):
    """The episodic :class:`~stargraph_mem.stores.memory.MemoryStore` over one SQLite file.

    Use ``async with SQLiteMemoryStore(path=...) as store``; any first call also opens and
    bootstraps. ``clock`` (tz-aware) stamps accesses and migrations, so tests can pin it.
    """

    _tables = (TABLE, "schema_migrations")
    _added_later = ("quarantine",)
    _store_name = "memory"

    limits: Limits = DEFAULT_LIMITS
    """The size limits every write checks (``open_database(limits=…)`` sets them)."""

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], datetime] = utc_now,
        shared: SharedConnection | None = None,
        limits: Limits | None = None,
    ) -> None:
        super().__init__(path, clock=clock, shared=shared)
        if limits is not None:
            self.limits = limits

    async def _bootstrap(self, db: aiosqlite.Connection) -> None:
        """Create the schema and record the baseline migration (IF NOT EXISTS: idempotent)."""
        baseline = (SCHEMA_VERSION, BASELINE_MIGRATION, self._now_us(), b'{"baseline":true}')
        async with transaction(db):
            for statement in _SCHEMA:
                await db.execute(statement)
            await db.execute(_BASELINE_SQL, baseline)
            await self._stamp_if_complete(db)

    async def _figures(self, db: aiosqlite.Connection) -> dict[str, Any]:
        count = await scalar(db, "SELECT count(*) FROM episodes")
        version = await scalar(db, "SELECT max(version) FROM schema_migrations")
        return {"schema_version": version, "episode_count": count, "fragment_count": count}

    # --- lifecycle ----------------------------------------------------------------------

    async def migrate(self, plan: MigrationPlan) -> None:
        """Apply nullable ``add_column`` operations in one transaction and record the plan.

        Re-applying a recorded plan is a no-op; anything else raises
        :class:`MigrationNotSupported` (naming store, plan and operation), nothing changed.
        """
        check_plan(plan, store="memory")
        now_us = self._now_us()
        async with self._write() as db:
            await apply_plan(db, plan, store="memory", ledger=_LEDGER, now_us=now_us)

    async def schema_version(self) -> int:
        """The highest applied migration version."""
        async with self._read() as db:
            return int(await scalar(db, "SELECT max(version) FROM schema_migrations"))

    # --- writes -------------------------------------------------------------------------

    async def put(self, episode: Episode, *, user: str, session: str, agent: str) -> None:
        """Store one episode under its own scope (which the caller must restate)."""
        check_scope(episode, user, session, agent)
        await self.put_many([episode])

    async def put_many(
        self, episodes: Sequence[Episode], *, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Store a batch in one transaction; return how many rows were new.

        Identical re-puts are no-ops; an id repeated with different fields (in the store or
        within the batch) raises :class:`DuplicateEpisodeError` and nothing is written.
        ``progress(done, total)`` is called as rows are written (still one transaction).
        """
        rows = dedupe_batch([episode_row(episode, self.limits) for episode in episodes])
        if not rows:
            return 0
        # a record's put may leave its commit to its pass, and be redone if that fails
        async with self._write(redo=partial(_put_again, rows)) as db:
            inserted = await put_rows(_MemoryConn(db), _STATEMENTS, rows, progress)
            if inserted != len(rows):
                await self._check_conflicts(db, rows)
        return inserted

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[EpisodeWriter]:
        """One write transaction for a stream of chunks: ``await writer.write(chunk)`` as
        often as needed; the block's end commits everything, or nothing when the block
        raises or called :meth:`EpisodeWriter.discard`.

        For inputs too large to hold at once (``stargraph-mem ingest``): duplicate ids are
        handled as :meth:`put_many` handles them within one batch, across the whole
        stream, but are returned by ``write`` instead of raised, so every one can be
        reported. The transaction holds the write lock until the block ends.
        """
        try:
            async with self._write() as db:
                start = await scalar(db, "SELECT coalesce(max(seq), 0) FROM episodes")
                writer = EpisodeWriter(_MemoryConn(db), _STATEMENTS, int(start), self.limits)
                yield writer
                if writer.discarded:
                    raise Discarded
        except Discarded:
            pass

    @staticmethod
    async def _check_conflicts(db: aiosqlite.Connection, rows: list[Row]) -> None:
        """Some ids already existed: fine if identical, else raise (the caller rolls back)."""
        by_id = {row[0]: row for row in rows}
        stored = await _rows(db, _STORED_SQL, (orjson.dumps(list(by_id)),))
        for old in stored:
            fields = row_differences(old, by_id[old[0]])
            if fields:
                raise duplicate_error(old[0], fields, "already exists")

    # --- reads --------------------------------------------------------------------------

    async def recent(
        self, user: str, session: str | None = None, agent: str | None = None, *, limit: int
    ) -> list[Episode]:
        """Newest first (by UTC time, then insertion); widens as session/agent are omitted.

        The rows returned get ``last_accessed`` = now and ``access_count`` + 1 (not on a
        file opened read-only: there the read records no access). Rows that
        cannot be decoded are skipped (up to ``limit`` good ones are still returned),
        quarantined, and logged as one warning each (:meth:`recent_checked` returns them).
        """
        episodes, quarantined = await self.recent_checked(user, session, agent, limit=limit)
        warn_quarantined(quarantined)
        return episodes

    async def recent_checked(
        self, user: str, session: str | None = None, agent: str | None = None, *, limit: int
    ) -> tuple[list[Episode], list[QuarantinedRow]]:
        """:meth:`recent`, and the undecodable rows met on the way, newest first (not logged).

        The good episodes are the newest ``limit`` decodable ones of the scope; the
        quarantined rows are those ranked among them that were skipped.
        """
        sql, params = recent_query(user, session, agent, limit)
        now_us = self._now_us()
        async with self._read() as db:
            if self.read_only_reason is not None:  # the accesses cannot be recorded
                found, bad = await read_recent(_MemoryConn(db), sql, params, limit, "?")
                quarantined = await self._quarantine(db, bad)
                return [episode for _, episode in found], quarantined
            async with transaction(db):
                found, bad = await read_recent(_MemoryConn(db), sql, params, limit, "?")
                await db.executemany(_TOUCH_SQL, [(now_us, seq) for seq, _ in found])
                quarantined = await self._quarantine(db, bad)
        return [episode for _, episode in found], quarantined

    async def since(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> list[EpisodeRecord]:
        """Episodes of one partition with ``seq > after_seq``, in ``seq`` order (read-only).

        Rows that cannot be decoded are skipped: the result is the first ``limit``
        decodable episodes after ``after_seq`` (fewer only when there are no more). Skipped
        rows are quarantined and logged as one warning each; a consumer that keeps a
        watermark should use :meth:`since_checked`, which also returns them.
        """

        async def read(after: int, want: int | None) -> CheckedRead:
            return await self.since_checked(partition, after, limit=want)

        return await read_since(read, after_seq, limit)

    async def since_checked(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> CheckedRead:
        """The rows of one partition with ``seq > after_seq``, in ``seq`` order, decoded.

        Reads the first ``limit`` rows (all when ``None``) with ``seq > after_seq``, good or
        not, and returns ``CheckedRead(records, quarantined)`` (a named 2-tuple): the rows
        that decode, as :class:`EpisodeRecord`, and those that do not, as
        :class:`QuarantinedRow` (each noted once in the ``quarantine`` table; nothing is
        logged). Both lists are in ``seq`` order and together are every row scanned, so:

        - ``read.scanned`` (``len(records) + len(quarantined)``) ``<= limit``, and
          ``read.scanned < limit`` means the partition has no rows after those scanned;
        - ``read.last_seq(after_seq)`` is the highest ``seq`` scanned (``after_seq`` when
          none was): the watermark that consumes every scanned row, bad ones included, so
          the next call starts after them.

        When the quarantine table cannot be written (a read-only file, a lock held too
        long), the bad rows are still skipped and returned, with ``recorded=False``.
        Raises ``ValueError`` for a limit < 1.
        """
        check_limit(limit, optional=True)
        params = (key_of_partition(partition), after_seq, -1 if limit is None else limit)
        async with self._read() as db:
            rows = await _rows(db, _SINCE_SQL, params)
            records, bad = split_rows(rows, row_record)
            quarantined = await self._quarantine(db, bad) if bad else []
        return CheckedRead(records, quarantined)

    async def by_ids(self, ids: Sequence[str]) -> list[EpisodeRecord]:
        """The stored episodes among ``ids``, in ``seq`` order; unknown ids are left out, and
        rows that cannot be decoded are skipped, quarantined and logged."""
        async with self._read() as db:
            rows = await _rows(db, _BY_IDS_SQL, (orjson.dumps(list(ids)),))
            records, bad = split_rows(rows, row_record)
            quarantined = await self._quarantine(db, bad) if bad else []
        warn_quarantined(quarantined)
        return records

    async def quarantined(self, partition: Partition | None = None) -> list[QuarantinedRow]:
        """The rows reads have quarantined (of one partition, or all), in ``seq`` order."""
        sql = f"SELECT {_QUARANTINE_COLUMNS} FROM quarantine"
        params: tuple[str, ...] = ()
        if partition is not None:
            sql += " WHERE partition_key = ?"
            params = (key_of_partition(partition),)
        async with self._read() as db:
            try:
                rows = await fetch(db, sql + " ORDER BY seq", params)
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    raise
                return []  # an older file opened read-only: nothing was ever noted
        return [quarantined_row(row) for row in rows]

    async def _quarantine(
        self, db: aiosqlite.Connection, bad: list[tuple[Any, str]]
    ) -> list[QuarantinedRow]:
        """Note undecodable rows in the ``quarantine`` table (once per seq) and return their
        entries in the order given; never raises for a table it cannot read or write."""

        async def note(entries: list[QuarantinedRow], at_us: int) -> bool:
            return await _note(db, entries, at_us)

        return await quarantine(
            _MemoryConn(db), _STATEMENTS, bad, self._now_us(), note, sqlite3.Error
        )

    async def max_seq(self, partition: Partition) -> int:
        """The partition's highest ``seq`` (0 when it has no episodes)."""
        async with self._read() as db:
            seq = await scalar(
                db,
                "SELECT seq FROM episodes WHERE partition_key = ? ORDER BY seq DESC LIMIT 1",
                (key_of_partition(partition),),
            )
        return 0 if seq is None else int(seq)

    async def count_since(self, partition: Partition, after_seq: int) -> int:
        """How many rows of the partition have ``seq > after_seq`` (quarantined ones too)."""
        async with self._read() as db:
            count = await scalar(
                db,
                "SELECT count(*) FROM episodes WHERE partition_key = ? AND seq > ?",
                (key_of_partition(partition), after_seq),
            )
        return int(count)

    async def partitions(self) -> list[Partition]:
        """Every distinct ``(user, agent)`` pair with episodes, sorted by (user, agent).

        A stored key that is not a well-formed partition key (a hand-edited row) is left
        out with a warning: no partition read could reach its rows.
        """
        async with self._read() as db:
            rows = await _rows(db, _PARTITIONS_SQL)
        found: list[Partition] = []
        for (key,) in rows:
            partition = partition_of(key)
            if partition is None:
                logger.warning("skipped malformed episodes partition key %r", key)
            else:
                found.append(partition)
        return sorted(found, key=lambda p: (p.user, p.agent))

    # --- consolidation: run by the consolidation runtime (stargraph_mem.engine) ----------

    async def consolidate(
        self, rule: ConsolidationRule, *, due_only: bool = False
    ) -> list[MemoryDelta]:
        """Run ``rule`` now (default classification table, over the episodes after its
        watermark) and apply its deltas; return them. ``due_only=True``: only partitions
        the rule's cadence says are due (see :mod:`stargraph_mem.engine.legacy`).

        The runtime is looked up when this runs (``stores.memory.consolidation_hook``), so
        importing the store loads neither the engine nor CLIPS.
        """
        return await consolidation_hook()(self, rule, due_only=due_only)

    # --- many partitions at once (batched passes) ----------------------------------------

    async def since_checked_of(
        self, reads: Sequence[tuple[Partition, int]], *, limit: int | None = None
    ) -> list[CheckedRead]:
        """:meth:`since_checked` of many ``(partition, after_seq)`` pairs (results in the
        order given), in one statement; ``limit`` applies to each partition."""
        check_limit(limit, optional=True)
        wanted = orjson.dumps([[key_of_partition(p), after] for p, after in reads])
        async with self._read() as db:
            rows = await _rows(db, _SINCE_OF_SQL, (wanted, -1 if limit is None else limit))
            split, bad = group_reads(rows, len(reads))
            noted = await self._quarantine(db, bad) if bad else []
        return checked_reads(split, noted)

    async def count_since_of(self, reads: Sequence[tuple[Partition, int]]) -> list[int]:
        """:meth:`count_since` of many ``(partition, after_seq)`` pairs, in one statement."""
        wanted = orjson.dumps([[key_of_partition(p), after] for p, after in reads])
        async with self._read() as db:
            rows = await fetch(db, _COUNT_OF_SQL, (wanted,))
        return [int(count) for _, count in sorted(rows)]


_SINCE_OF_SQL: Final = f"""
    SELECT j.key, {", ".join("e." + c.strip() for c in _READ_COLUMNS.split(","))}
    FROM json_each(?1) j JOIN episodes e ON e.seq IN (
        SELECT seq FROM episodes WHERE partition_key = j.value ->> 0 AND seq > j.value ->> 1
        ORDER BY seq LIMIT ?2)
    ORDER BY j.key, e.seq"""
_COUNT_OF_SQL: Final = """
    SELECT j.key, (SELECT count(*) FROM episodes e
        WHERE e.partition_key = j.value ->> 0 AND e.seq > j.value ->> 1)
    FROM json_each(?) j"""
