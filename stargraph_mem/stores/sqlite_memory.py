"""Episodic memory over SQLite (aiosqlite): the episodes schema, its migrations and the
file's connection.

Reads and writes are the shared :class:`~stargraph_mem.stores.repositories.episodes.Episodes`;
here: the tables, the plan ledger, and the connection view that reads TEXT which is not
UTF-8 instead of failing (such rows are then quarantined by the shared code). Writes take
``BEGIN IMMEDIATE`` so several processes can share one file (WAL).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Final, cast

import aiosqlite

from stargraph_mem.errors import StoreError
from stargraph_mem.model.deltas import MemoryDelta
from stargraph_mem.model.limits import Limits
from stargraph_mem.model.time import utc_now
from stargraph_mem.stores.memory import consolidation_hook
from stargraph_mem.stores.models import ConsolidationRule, MigrationPlan
from stargraph_mem.stores.repositories import episodes
from stargraph_mem.stores.repositories.episode_io import EpisodeWriter
from stargraph_mem.stores.repositories.episode_rows import TABLE, NotUtf8, row_record, scope_filter
from stargraph_mem.stores.repositories.episodes import Episodes
from stargraph_mem.stores.sqlite.connection import BUSY_TIMEOUT_MS as BUSY_TIMEOUT_MS  # re-export
from stargraph_mem.stores.sqlite.connection import (
    NOT_HERE,
    SharedConnection,
    SQLiteConn,
    SQLiteStoreBase,
    fetch_rows,
    here,
    scalar,
    transaction,
)
from stargraph_mem.stores.sqlite.connection import to_us as to_us  # re-export
from stargraph_mem.stores.sqlite.dialect import SQLITE
from stargraph_mem.stores.sqlite.migrations import Ledger, apply_plan, check_plan

__all__ = [
    "BASELINE_MIGRATION",
    "SCHEMA_VERSION",
    "EpisodeWriter",
    "SQLiteMemoryStore",
    "row_record",
    "scope_filter",
]

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
"""The episodes table (``select`` clauses run over an in-memory copy of a pass's episodes)."""
_LEDGER: Final = Ledger(
    "schema_migrations",
    "INSERT INTO schema_migrations (version, name, applied_at_us, plan) "
    "VALUES ((SELECT max(version) + 1 FROM schema_migrations), ?, ?, ?)",
)
_BASELINE_SQL: Final = (
    "INSERT OR IGNORE INTO schema_migrations (version, name, applied_at_us, plan) "
    "VALUES (?, ?, ?, ?)"
)

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


def recent_query(
    user: str, session: str | None, agent: str | None, limit: int
) -> tuple[str, tuple[str | int, ...]]:
    """The SQL and parameters ``recent()`` runs (public so tests can EXPLAIN the real query)."""
    return episodes.recent_query(SQLITE, user, session, agent, limit)


class _MemoryConn(SQLiteConn):
    """The shared episode code's connection: reads survive TEXT that is not UTF-8."""

    __slots__ = ()

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        return await _rows(self.db, sql, params)


# --- the store ------------------------------------------------------------------------


class SQLiteMemoryStore(Episodes, SQLiteStoreBase):
    """The episodic :class:`~stargraph_mem.stores.memory.MemoryStore` over one SQLite file
    (the shared :class:`~stargraph_mem.stores.repositories.episodes.Episodes`).

    Use ``async with SQLiteMemoryStore(path=...) as store``; any first call also opens and
    bootstraps. ``clock`` (tz-aware) stamps accesses and migrations, so tests can pin it.
    """

    _tables = (TABLE, "schema_migrations")
    _added_later = ("quarantine",)
    _store_name = "memory"
    _conn_type = _MemoryConn
    _note_errors: ClassVar[tuple[type[Exception], ...]] = (sqlite3.Error, StoreError)
    _unreadable: ClassVar[type[Exception]] = sqlite3.Error

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

    async def migrate(self, plan: MigrationPlan) -> None:
        """Apply nullable ``add_column`` operations in one transaction and record the plan.

        Re-applying a recorded plan is a no-op; anything else raises
        :class:`MigrationNotSupported` (naming store, plan and operation), nothing changed.
        """
        check_plan(plan, store="memory")
        now_us = self._now_us()
        async with self._write() as db:
            await apply_plan(db, plan, store="memory", ledger=_LEDGER, now_us=now_us)

    async def consolidate(
        self, rule: ConsolidationRule, *, due_only: bool = False
    ) -> list[MemoryDelta]:
        """Run ``rule`` now (default classification table, over the episodes after its
        watermark) and apply its deltas; return them. ``due_only=True``: only partitions
        the rule's cadence says are due (see :mod:`stargraph_mem.engine.contract`).

        The runtime is looked up when this runs (``stores.memory.consolidation_hook``), so
        importing the store loads neither the engine nor CLIPS.
        """
        return await consolidation_hook()(self, rule, due_only=due_only)
