"""The store backends the conformance tests run on: SQLite (a file) and PostgreSQL (a
fresh schema of the test server, dropped afterwards).

PostgreSQL tests never skip: when the server cannot be reached they fail and say so.
``STARGRAPH_TEST_PG`` overrides the server URL (default: the local test server).
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from stargraph_mem.model.time import utc_now
from stargraph_mem.stores import SQLiteFactStore, SQLiteMemoryStore
from stargraph_mem.stores.fact import ProvenanceAdapter
from stargraph_mem.stores.postgres import (
    PostgresDatabase,
    PostgresFactStore,
    PostgresMemoryStore,
    PostgresScheduleStore,
)
from stargraph_mem.stores.sqlite.schedule import SQLiteScheduleStore

__all__ = [
    "BACKENDS",
    "PG_URL",
    "AnyFactStore",
    "AnyMemoryStore",
    "AnyScheduleStore",
    "Backend",
    "NewLocation",
    "open_backend",
    "pg_schema",
    "raw_execute",
    "raw_rows",
    "schema_snapshot",
    "snapshot",
]

BACKENDS = ("sqlite", "postgresql")
NewLocation = Callable[[], str]
"""The ``new_location`` fixture: each call gives where a fresh memory lives."""
PG_URL = os.environ.get("STARGRAPH_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

AnyMemoryStore = SQLiteMemoryStore | PostgresMemoryStore
AnyFactStore = SQLiteFactStore | PostgresFactStore
AnyScheduleStore = SQLiteScheduleStore | PostgresScheduleStore


@dataclass
class Backend:
    """The three stores of one fresh database of one backend."""

    name: str
    memory: AnyMemoryStore
    facts: AnyFactStore
    schedule: AnyScheduleStore


async def _admin() -> psycopg.AsyncConnection[Any]:
    """A direct connection to the test server; a failure fails the test (never skips)."""
    try:
        return await psycopg.AsyncConnection.connect(PG_URL, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"the PostgreSQL test server at {PG_URL} cannot be reached ({exc}); start it or "
            "set STARGRAPH_TEST_PG to a reachable postgresql:// URL",
            pytrace=False,
        )


@asynccontextmanager
async def pg_schema() -> AsyncIterator[str]:
    """A schema name no one uses; the schema (if created) is dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = await _admin()
    try:
        yield name
    finally:
        try:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await admin.close()


@asynccontextmanager
async def memory_location(backend: str, prefix: str = "memory-") -> AsyncIterator[str]:
    """Where a fresh memory of ``backend`` lives: a SQLite file in a temporary directory, or
    a PostgreSQL schema no one uses (dropped afterwards)."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield str(Path(tmp) / "m.db")
    else:
        async with pg_schema() as name:
            yield f"{PG_URL}?schema={name}"


@asynccontextmanager
async def open_backend(
    name: str,
    tmp_path: Path,
    *,
    clock: Callable[[], datetime] = utc_now,
    adapter: ProvenanceAdapter | None = None,
) -> AsyncIterator[Backend]:
    """Fresh, bootstrapped stores of backend ``name``; closed (and dropped) afterwards."""
    if name == "sqlite":
        path = tmp_path / "memory.db"
        memory = SQLiteMemoryStore(path, clock=clock)
        facts = SQLiteFactStore(path, clock=clock, adapter=adapter)
        schedule = SQLiteScheduleStore(path, clock=clock)
        async with memory, facts, schedule:
            yield Backend(name, memory, facts, schedule)
        return
    async with pg_schema() as schema:
        url = f"{PG_URL}?schema={schema}"
        async with PostgresDatabase(url, clock=clock, adapter=adapter) as db:
            yield Backend(name, db.memory, db.facts, db.schedule)


def _sqlite_dump(path: Path) -> str:
    with closing(sqlite3.connect(path)) as db:
        return "\n".join(db.iterdump())


async def snapshot(store: AnyFactStore | AnyMemoryStore | AnyScheduleStore) -> str:
    """Every table's rows of the store's database, as text (to compare before and after)."""
    if isinstance(store, SQLiteFactStore | SQLiteMemoryStore | SQLiteScheduleStore):
        return _sqlite_dump(store.path)
    lines: list[str] = []
    async with store.database.connection() as db:
        tables = await db.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = "
            "current_schema() ORDER BY table_name"
        )
        for (table,) in tables:
            rows = await db.fetch(f'SELECT row_to_json(t)::text FROM "{table}" t')
            lines += sorted(f"{table}: {row[0]}" for row in rows)
    return "\n".join(lines)


async def raw_rows(
    store: AnyFactStore | AnyMemoryStore | AnyScheduleStore, sql: str
) -> list[tuple[Any, ...]]:
    """The rows of one read statement written in SQL both backends accept (no parameters)."""
    if isinstance(store, SQLiteFactStore | SQLiteMemoryStore | SQLiteScheduleStore):
        with closing(sqlite3.connect(store.path)) as db:
            return [tuple(row) for row in db.execute(sql).fetchall()]
    async with store.database.connection() as conn:
        return [tuple(row) for row in await conn.fetch(sql)]


async def raw_execute(
    store: AnyFactStore | AnyMemoryStore | AnyScheduleStore, sql: str, params: tuple[Any, ...]
) -> None:
    """Run one write behind the store's back (``?`` placeholders; both backends' SQL)."""
    if isinstance(store, SQLiteFactStore | SQLiteMemoryStore | SQLiteScheduleStore):
        with closing(sqlite3.connect(store.path)) as db, db:
            db.execute(sql, params)
        return
    async with store.database.connection() as conn:
        await conn.execute(sql.replace("?", "%s"), params)


async def schema_snapshot(store: AnyFactStore | AnyMemoryStore | AnyScheduleStore) -> str:
    """The tables and columns of the store's database and its recorded migrations."""
    if isinstance(store, SQLiteFactStore | SQLiteMemoryStore | SQLiteScheduleStore):
        tables = await raw_rows(store, "SELECT name, sql FROM sqlite_master ORDER BY name")
    else:
        tables = await raw_rows(
            store,
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() ORDER BY 1, 2",
        )
    migrations = await raw_rows(store, "SELECT version, name FROM schema_migrations ORDER BY 1")
    return repr([*tables, *migrations])
