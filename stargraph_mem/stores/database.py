"""The database owner: one object per memory that owns connections and transactions.

A memory lives in one database, named by a URL: a plain path or ``sqlite:///…`` (the
embedded default, one SQLite file) or ``postgresql://…`` (a server shared by many
workers). :func:`open_database` returns its owner, whose repositories (``memory`` for
episodes, ``facts`` for facts, lineage, audit and watermarks, ``schedule`` for cadence
state and leases, ``vectors`` for embeddings and the episodes' full-text index,
``entities`` for entities and graph reads) work on the owner's connections; the engine
only ever sees the repositories' Protocols (:mod:`stargraph_mem.stores.protocols`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiosqlite

from stargraph_mem.model.limits import Limits
from stargraph_mem.model.time import utc_now
from stargraph_mem.stores.protocols import Database
from stargraph_mem.stores.resources import AsyncResource, closed_on_failure
from stargraph_mem.stores.sqlite.connection import SharedConnection, scalar, transaction
from stargraph_mem.stores.sqlite.entities import SQLiteEntityStore
from stargraph_mem.stores.sqlite.schedule import SQLiteScheduleStore
from stargraph_mem.stores.sqlite.search import catch_up_text
from stargraph_mem.stores.sqlite.vectors import SQLiteVectorStore
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore
from stargraph_mem.stores.url import DatabaseURL, bad_location, parse_database_url, redact

if TYPE_CHECKING:
    from stargraph_mem.stores.tables import Table

__all__ = [
    "DatabaseURL",
    "SQLiteDatabase",
    "open_database",
    "parse_database_url",
    "redact",
]


class SQLiteDatabase(AsyncResource):
    """One SQLite file: one connection shared by the three repositories (so they can
    work inside one transaction, :meth:`transaction`), plus the fact store's background
    checkpointer while a long run asks for one."""

    backend: str = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], datetime] = utc_now,
        read_only: bool | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.path = Path(path)
        self.location = DatabaseURL("sqlite", str(path), self.path)
        self.connection = SharedConnection(self.path)
        self.connection.read_only = read_only
        self.memory = SQLiteMemoryStore(self.path, clock=clock, shared=self.connection)
        if limits is not None:
            self.memory.limits = limits
        self.facts = SQLiteFactStore(self.path, clock=clock, shared=self.connection)
        self.schedule = SQLiteScheduleStore(self.path, clock=clock, shared=self.connection)
        self.vectors = SQLiteVectorStore(self.path, clock=clock, shared=self.connection)
        self.entities = SQLiteEntityStore(
            self.path, clock=clock, shared=self.connection, needs=(self.memory, self.facts)
        )

    @property
    def read_only_reason(self) -> str | None:
        """Why the open database is read-only (``None`` when writable or not open)."""
        return self.connection.read_only_reason

    async def bootstrap(self) -> None:
        """Create (or migrate) every repository's schema; a read-only file is checked."""
        async with closed_on_failure(self.close):
            await self.memory.bootstrap()
            await self.facts.bootstrap()
            await self.schedule.bootstrap()
            await self.vectors.bootstrap()
            await self.entities.bootstrap()

    async def close(self) -> None:
        """Finish the fact store's background work, then close the connection."""
        try:
            await self.facts.close()
        finally:
            await self.connection.close()

    async def reconnect(self) -> None:
        """Nothing to do: a SQLite file has no server connection to lose."""

    def source(self) -> _SQLiteTables:
        """Whole-table reads for a copy from this database."""
        return _SQLiteTables(self)

    @asynccontextmanager
    async def loading(self) -> AsyncIterator[_SQLiteTables]:
        """Whole-table writes for a copy into this database, in one transaction."""
        async with self.transaction() as db:
            yield _SQLiteTables(self, db)

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[None]:
        """Every read of the repositories inside the block sees one state of the file (a
        read transaction; no write may run inside it)."""
        async with self.connection.lock:
            db = await self.connection.open()
            await db.execute("BEGIN")
        try:
            yield
        finally:
            async with self.connection.lock:
                if db.in_transaction:
                    await db.execute("COMMIT")

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """The shared connection inside one write transaction, held by this coroutine."""
        async with self.connection.lock:
            db = await self.connection.open()
            async with transaction(db):
                yield db


def _columns(table: Table) -> str:
    return ", ".join(f'"{column}"' for column in table.columns)


async def _batches(
    db: aiosqlite.Connection, sql: str, chunk: int
) -> AsyncIterator[list[tuple[Any, ...]]]:
    """The rows of ``sql``, ``chunk`` at a time."""
    async with db.execute(sql) as cursor:
        while batch := await cursor.fetchmany(chunk):
            yield [tuple(row) for row in batch]


class _SQLiteTables:
    """A copy's reads and writes of whole tables on one SQLite connection (see
    :mod:`stargraph_mem.stores.copy`)."""

    def __init__(self, database: SQLiteDatabase, db: aiosqlite.Connection | None = None) -> None:
        self.database = database
        self.db = db
        """The connection inside the loading transaction (``None``: read through the lock)."""

    async def rows(self, table: Table, chunk: int) -> AsyncIterator[list[tuple[Any, ...]]]:
        order = ", ".join(f'"{column}"' for column in table.order)
        sql = f'SELECT {_columns(table)} FROM "{table.name}" ORDER BY {order}'
        if self.db is not None:  # inside the loading transaction
            async for batch in _batches(self.db, sql, chunk):
                yield batch
            return
        async with self.database.connection.lock:
            async for batch in _batches(await self.database.connection.open(), sql, chunk):
                yield batch

    async def count(self, table: str) -> int:
        assert self.db is not None
        return int(await scalar(self.db, f'SELECT count(*) FROM "{table}"') or 0)

    async def insert(self, table: Table, rows: Sequence[tuple[Any, ...]]) -> None:
        assert self.db is not None
        marks = ", ".join("?" for _ in table.columns)
        sql = f'INSERT INTO "{table.name}" ({_columns(table)}) VALUES ({marks})'
        await self.db.executemany(sql, rows)

    async def finish(self) -> None:
        """Index the copied facts for search."""
        assert self.db is not None
        await catch_up_text(self.db)


def open_database(
    location: str | Path | DatabaseURL,
    *,
    clock: Callable[[], datetime] = utc_now,
    read_only: bool | None = None,
    limits: Limits | None = None,
) -> Database:
    """The owner of the database at ``location`` (nothing is opened until
    ``async with`` or ``bootstrap``); ``limits`` are the size limits its writes check
    (default :data:`~stargraph_mem.model.limits.DEFAULT_LIMITS`)."""
    url = location if isinstance(location, DatabaseURL) else parse_database_url(location)
    if url.backend == "sqlite":
        assert url.path is not None
        return SQLiteDatabase(url.path, clock=clock, read_only=read_only, limits=limits)
    try:  # imported here: the backend imports this package's modules, never this one
        from stargraph_mem.stores.postgres import PostgresDatabase
    except ImportError as exc:  # the optional extra is not installed
        raise bad_location(
            str(url),
            f"PostgreSQL needs the postgres extra: pip install 'stargraph_mem[postgres]' ({exc})",
        ) from exc
    if read_only:
        raise bad_location(str(url), "a PostgreSQL memory cannot be opened read-only")
    return PostgresDatabase(url.url, clock=clock, limits=limits)
