"""Promoted facts over SQLite (aiosqlite): the connection handling of the fact repository.

The methods and their SQL are the repository's
(:class:`~stargraph_mem.stores.repositories.facts.SQLFactRepository`); this module holds
the file's schema and migrations, its connection (statements on the caller's thread where
they may run there, one ``BEGIN IMMEDIATE`` per write), the search index's upkeep and the
background checkpoints of long runs.

Update and delete close a fact's validity (``valid_until_us``, ``superseded_by``,
``closed_by``); rows are never deleted. A batch of deltas, its watermark advances and its
rejections are applied in one ``BEGIN IMMEDIATE`` transaction with ``executemany``
per table and chunk (:class:`~stargraph_mem.stores.repositories.fact_apply.Batch`, shared with the
PostgreSQL store), so a failure anywhere leaves the file exactly as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import aiosqlite

from stargraph_mem.errors import StoreError
from stargraph_mem.model.facts import FactPattern
from stargraph_mem.model.time import utc_now
from stargraph_mem.stores.fact import ProvenanceAdapter
from stargraph_mem.stores.models import MigrationPlan
from stargraph_mem.stores.repositories.fact_passes import CHUNK, RecordRuns
from stargraph_mem.stores.repositories.fact_rows import (
    PassBasis,
    PassWrite,
    claim_holder,
    fact_from_row,
    validate_deltas,
)
from stargraph_mem.stores.repositories.fact_rows import fact_query as dialect_query
from stargraph_mem.stores.repositories.facts import FACTS_LOCK, Search, SQLFactRepository
from stargraph_mem.stores.repositories.sweep_schema import DROP_SWEEP_INDEXES, ON_DEMAND_MARK
from stargraph_mem.stores.sqlite.connection import (
    WAL_AUTOCHECKPOINT_PAGES,
    SharedConnection,
    SQLiteConn,
    SQLiteStoreBase,
    open_connection,
    scalar,
    transaction,
)
from stargraph_mem.stores.sqlite.dialect import SQLITE as SQLITE_DIALECT
from stargraph_mem.stores.sqlite.migrations import apply_plan, check_plan
from stargraph_mem.stores.sqlite.schedule import record_runs
from stargraph_mem.stores.sqlite.schema import (
    CACHE_KIB,
    LEDGER,
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    TABLES,
    stored_version,
)
from stargraph_mem.stores.sqlite.search import catch_up_text, text_behind, text_copy

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
    return dialect_query(SQLiteFactStore.sql, pattern, as_of_us=as_of_us)


class SQLiteFactStore(SQLiteStoreBase, SQLFactRepository[SQLiteConn]):
    """The fact repository (:class:`SQLFactRepository`) over one SQLite file: its
    connection, schema, migrations, search index upkeep and background checkpoints.

    By default the same file as the episode store. ``clock`` (tz-aware) stamps
    ``recorded_at`` and audit rows; ``adapter`` carries listeners for new facts.
    """

    dialect = SQLITE_DIALECT
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
        self._repository(adapter, episodes_here=None)
        self._checkpointer: aiosqlite.Connection | None = None
        self._checkpointing: asyncio.Task[None] | None = None
        self._background_users = 0
        self._background_lock = asyncio.Lock()
        self._deferred = False
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

    # --- the repository's connection handling ------------------------------------------

    def _facts_reading(self) -> AbstractAsyncContextManager[SQLiteConn]:
        return _AsConn(self._read())

    def _facts_writing(
        self, lock: str | None = FACTS_LOCK
    ) -> AbstractAsyncContextManager[SQLiteConn]:
        """A write transaction (the file has one writer: ``lock`` is not needed)."""
        return _AsConn(self._write())

    @asynccontextmanager
    async def _apply_transaction(self) -> AsyncIterator[SQLiteConn]:
        """The connection in a write transaction; a background checkpoint starts after
        its commit when one is wanted."""
        async with self._lock:
            db = await self._ready()
            await self._settle()
            await self._checkpoint_mode(db)
            async with transaction(db):
                yield SQLiteConn(db)
        if self._deferred and self._checkpointer is not None:
            self._checkpointing = asyncio.create_task(self._checkpoint(self._checkpointer))

    def _run_recorder(self, db: SQLiteConn) -> RecordRuns:
        return partial(record_runs, db.db)

    async def _search_without_writing(
        self, db: SQLiteConn, search: Search
    ) -> list[Sequence[Any]] | None:
        """The search index may trail the newest facts (see
        :mod:`~stargraph_mem.stores.sqlite.search`): searched as it is when up to date;
        on a read-only file, the connection's own copy of it is searched instead; else
        None (the index is brought up to date first)."""
        behind = await text_behind(db.db)
        if behind is None:
            return await db.fetch(*self._search_sql(search))
        if self.read_only_reason is not None:  # see the facts the file's index lacks
            return await db.fetch(*self._search_sql(search, await text_copy(db.db)))
        return None

    async def _catch_up_text(self, db: SQLiteConn) -> None:
        await catch_up_text(db.db)


class _AsConn:
    """A store's ``_read()``/``_write()`` holding, entered as a :class:`SQLiteConn`."""

    __slots__ = ("_holding",)

    def __init__(self, holding: AbstractAsyncContextManager[aiosqlite.Connection]) -> None:
        self._holding = holding

    async def __aenter__(self) -> SQLiteConn:
        return SQLiteConn(await self._holding.__aenter__())

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._holding.__aexit__(kind, exc, tb)


async def _sweep_indexes_on_demand(db: aiosqlite.Connection) -> None:
    """Drop the sweep indexes a file made before they were made on demand has (once: the
    file is marked), so closes stop writing to those no sweep reads (see
    :mod:`~stargraph_mem.stores.repositories.sweep_schema`)."""
    if await scalar(db, _MARKED, (ON_DEMAND_MARK,)) is None:
        for statement in DROP_SWEEP_INDEXES:
            await db.execute(statement)
        await db.execute(_MARK, (ON_DEMAND_MARK,))


_OLDEST_TABLES: Final = ("fact_store_meta", "facts", "lineage", "audit")
"""The tables a fact store of any older version has (its migrations read them)."""
_MARKED: Final = "SELECT value FROM fact_store_meta WHERE key = ?"
_MARK: Final = "INSERT INTO fact_store_meta (key, value) VALUES (?, '1')"
