"""The PostgreSQL database owner: one connection pool, transactions, the versioned schema.

``PostgresDatabase("postgresql://user@host/db?schema=NAME")`` owns an
:class:`~psycopg_pool.AsyncConnectionPool`; its three repositories (:attr:`memory`,
:attr:`facts`, :attr:`schedule`) run their statements on it. ``schema`` (ours, removed
before connecting) names the PostgreSQL schema that holds every table (created if
missing), so one database can hold several memories. :meth:`bootstrap` applies the
migrations the schema lacks, each in its own transaction, recorded in a ledger table;
a schema written by a newer version is refused untouched.

Writes that must not interleave (episode seqs committed in order, a batch's fact rowids
and audit seqs, claims and leases) take a transaction-level advisory lock, the
equivalent of SQLite's one writer, so several workers on several machines can share it.

A connection the server drops or refuses (a restart, a failover) raises
:class:`~stargraph_mem.errors.DatabaseUnavailableError` and retires the pool, whose other
connections are likely dead too; the next use (or :meth:`PostgresDatabase.reconnect`)
opens a fresh one. Statements the server refuses raise psycopg's errors unchanged.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg_pool import AsyncConnectionPool

from stargraph_mem.errors import DatabaseUnavailableError, StoreError
from stargraph_mem.model.limits import Limits
from stargraph_mem.model.time import to_us, utc_now
from stargraph_mem.stores.fact import ProvenanceAdapter
from stargraph_mem.stores.models import StoreHealth
from stargraph_mem.stores.postgres.connection import PgConn
from stargraph_mem.stores.postgres.entities import PostgresEntityStore
from stargraph_mem.stores.postgres.fact import PostgresFactStore
from stargraph_mem.stores.postgres.failures import connection_lost, first_line
from stargraph_mem.stores.postgres.memory import PostgresMemoryStore
from stargraph_mem.stores.postgres.schedule import PostgresScheduleStore
from stargraph_mem.stores.postgres.schema import LEDGER_TABLE, MIGRATIONS, SCHEMA_VERSION
from stargraph_mem.stores.postgres.tables import PostgresTables
from stargraph_mem.stores.postgres.vectors import PostgresVectorStore
from stargraph_mem.stores.resources import AsyncResource
from stargraph_mem.stores.url import redact

__all__ = ["CLOSE_TIMEOUT_S", "CONNECT_TIMEOUT_S", "PostgresDatabase", "split_url"]

CONNECT_TIMEOUT_S: Final = 10
"""How long opening a connection may take before it fails (never hang on a dead server)."""
CLOSE_TIMEOUT_S: Final = 5.0
"""How long closing waits for connections still in use before it drops them."""
RETIRE_TIMEOUT_S: Final = 1.0
"""How long closing a pool whose connections were lost waits for its background tasks."""
_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_LOCK_SPACE: Final = 0x5347
"""First key of every advisory lock the stores take (the second names schema and purpose)."""
_LEDGER: Final = (
    f"CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} (version INTEGER PRIMARY KEY, "
    "name TEXT NOT NULL, applied_at_us BIGINT NOT NULL)"
)

_BASELINE: Final = (
    "INSERT INTO schema_migrations (version, name, applied_at_us, plan) "
    "VALUES (1, '0001_episodes', %s, '{\"baseline\":true}'::bytea)"
)


def split_url(url: str) -> tuple[str, str]:
    """``(conninfo, schema)``: the URL without our ``schema`` parameter, and that schema
    (``public`` by default); a schema that is not a plain identifier is refused."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise StoreError(f"not a PostgreSQL URL (postgresql://…): {redact(url)}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    rest = [(key, value) for key, value in query if key != "schema"]
    schema = schemas[-1] if schemas else "public"
    if not _IDENTIFIER.fullmatch(schema) or schema.lower().startswith("pg_"):
        raise StoreError(
            f"schema {schema!r} is not a valid PostgreSQL schema name (letters, digits and "
            "_, not starting with a digit or pg_, at most 63 characters)",
            schema=schema,
        )
    return urlunsplit(parts._replace(query=urlencode(rest))), schema


def holds_memory(url: str) -> bool | None:
    """Whether the schema ``url`` names holds a memory (its migration ledger), asked over
    one short connection; None when the server cannot be asked (the caller's own open
    then says why). Read commands refuse a schema without one, as they refuse a missing
    SQLite file, where opening would create it empty."""
    conninfo, schema = split_url(url)
    try:
        with psycopg.connect(conninfo, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
            row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".{LEDGER_TABLE}',)).fetchone()
    except psycopg.Error:
        return None
    return row is not None and row[0] is not None


class PostgresDatabase(AsyncResource):
    """One PostgreSQL schema holding the episode, fact and schedule stores.

    ``async with PostgresDatabase(url) as db`` bootstraps and closes; any first use of a
    repository also opens and bootstraps. ``clock`` (tz-aware) stamps writes as the
    SQLite stores' clock does; ``adapter`` carries the fact store's listeners.
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        adapter: ProvenanceAdapter | None = None,
        max_connections: int = 4,
        limits: Limits | None = None,
    ) -> None:
        self.url = url
        self.conninfo, self.schema = split_url(url)
        self.clock = clock
        self._max = max_connections
        self._pool: AsyncConnectionPool[Any] | None = None
        self._retired: list[AsyncConnectionPool[Any]] = []
        self._opening = asyncio.Lock()
        self.memory = PostgresMemoryStore(self)
        if limits is not None:
            self.memory.limits = limits
        self.facts = PostgresFactStore(self, adapter=adapter)
        self.schedule = PostgresScheduleStore(self)
        self.vectors = PostgresVectorStore(self)
        self.entities = PostgresEntityStore(self)

    backend: Final = "postgresql"

    @property
    def read_only_reason(self) -> str | None:
        """Always ``None``: a PostgreSQL memory is written through the server."""
        return None

    @property
    def where(self) -> str:
        """The database and schema, for messages (no password)."""
        return f"{redact(self.conninfo)} (schema {self.schema})"

    def now_us(self) -> int:
        """The clock as UTC microseconds; a naive clock value raises."""
        return to_us(self.clock(), "clock()")

    # --- lifecycle ----------------------------------------------------------------------

    async def bootstrap(self) -> None:
        """Create the schema and apply the migrations it lacks; open the pool. Idempotent."""
        await self._ready()

    async def close(self) -> None:
        """Close the pool (a later use reopens it); waits at most ``CLOSE_TIMEOUT_S``."""
        pool, self._pool = self._pool, None
        await self._close_retired()
        if pool is not None:
            await pool.close(timeout=CLOSE_TIMEOUT_S)

    async def reconnect(self) -> None:
        """Drop the pool and open a fresh one (after the server was restarted, its old
        connections are dead); :class:`DatabaseUnavailableError` while it is still away."""
        async with self._opening:
            pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close(timeout=RETIRE_TIMEOUT_S)
        await self._ready()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        """A direct connection (autocommit), its failure told with the server it tried
        (:class:`DatabaseUnavailableError` when the server could not be reached)."""
        try:
            return await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            )
        except psycopg.Error as exc:
            message = f"cannot connect to PostgreSQL at {self.where}: {exc}"
            if connection_lost(exc, None):
                raise DatabaseUnavailableError(
                    message, where=self.where, reason=first_line(exc)
                ) from exc
            raise StoreError(message) from exc

    def _lost(
        self, exc: psycopg.Error, pool: AsyncConnectionPool[Any] | None
    ) -> DatabaseUnavailableError:
        """The error for a lost connection; ``pool`` (if still ours) is retired, so the
        next use opens a fresh one instead of reusing its dead connections."""
        if pool is not None and self._pool is pool:
            self._pool = None
            self._retired.append(pool)
        reason = first_line(exc)
        return DatabaseUnavailableError(
            f"lost the connection to PostgreSQL at {self.where}: {reason}",
            where=self.where,
            reason=reason,
        )

    async def _close_retired(self) -> None:
        """Close pools retired after a lost connection (their connections are dead)."""
        retired, self._retired = self._retired, []
        for pool in retired:
            await pool.close(timeout=RETIRE_TIMEOUT_S)

    async def _ready(self) -> AsyncConnectionPool[Any]:
        """The open pool, after the schema is migrated (done once per open)."""
        if self._pool is not None:
            return self._pool
        async with self._opening:
            await self._close_retired()
            if self._pool is None:
                self._pool = await self._open()
            return self._pool

    async def _open(self) -> AsyncConnectionPool[Any]:
        conn = await self._connect()
        try:
            await self._migrate(conn)
        except psycopg.Error as exc:
            if connection_lost(exc, conn):
                raise self._lost(exc, None) from exc
            raise
        finally:
            await conn.close()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.conninfo,
            min_size=1,
            max_size=self._max,
            open=False,
            timeout=CONNECT_TIMEOUT_S * 3,
            kwargs={
                "autocommit": True,
                "connect_timeout": CONNECT_TIMEOUT_S,
                "options": f'-c search_path="{self.schema}"',
            },
        )
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as exc:
            await pool.close(timeout=RETIRE_TIMEOUT_S)
            if connection_lost(exc, None):
                raise self._lost(exc, None) from exc
            raise
        return pool

    async def _migrate(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Create the schema and ledger, then apply each missing migration in its own
        transaction (under a lock, so concurrent bootstraps apply each once)."""
        name = self.schema
        async with conn.transaction():
            await self._lock(PgConn(conn), "schema")
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{name}"')
            await conn.execute(f'SET LOCAL search_path = "{name}"')
            await conn.execute(_LEDGER)
            version = await self._version(PgConn(conn))
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"PostgreSQL schema {name!r} is at stores schema version {version}; this "
                    f"version knows up to {SCHEMA_VERSION} (upgrade stargraph_mem)",
                    schema_version=version,
                )
        for number, title, statements in MIGRATIONS:
            async with conn.transaction():
                await self._lock(PgConn(conn), "schema")
                await conn.execute(f'SET LOCAL search_path = "{name}"')
                if await self._version(PgConn(conn)) >= number:
                    continue
                for statement in statements:
                    await conn.execute(statement)
                await conn.execute(
                    f"INSERT INTO {LEDGER_TABLE} (version, name, applied_at_us) "
                    "VALUES (%s, %s, %s)",
                    (number, title, self.now_us()),
                )
                if number == 1:  # the memory store's plan ledger starts at its baseline
                    await conn.execute(_BASELINE, (self.now_us(),))

    @staticmethod
    async def _version(conn: PgConn) -> int:
        return int(await conn.scalar(f"SELECT coalesce(max(version), 0) FROM {LEDGER_TABLE}"))

    async def _lock(self, conn: PgConn, purpose: str) -> None:
        """Hold an advisory lock on ``purpose`` in this schema until the transaction ends."""
        await conn.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
            (_LOCK_SPACE, f"{self.schema}/{purpose}"),
        )

    # --- connections --------------------------------------------------------------------

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[PgConn]:
        """A pooled connection in autocommit mode (each statement commits: reads)."""
        pool = await self._ready()
        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            async with pool.connection() as conn:
                yield PgConn(conn)
        except psycopg.Error as exc:
            if connection_lost(exc, conn):
                raise self._lost(exc, pool) from exc
            raise

    @asynccontextmanager
    async def transaction(self, lock: str | None = None) -> AsyncIterator[PgConn]:
        """A pooled connection inside one transaction: committed when the block ends,
        rolled back when it raises. ``lock`` names an advisory lock held until the end.

        A connection lost on the way, its commit included, raises
        :class:`DatabaseUnavailableError` (a lost commit may have been applied)."""
        pool = await self._ready()
        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            async with pool.connection() as conn, conn.transaction():
                db = PgConn(conn)
                if lock is not None:
                    await self._lock(db, lock)
                yield db
        except psycopg.Error as exc:
            if connection_lost(exc, conn):
                raise self._lost(exc, pool) from exc
            raise

    # --- copies ------------------------------------------------------------------------

    def source(self) -> PostgresTables:
        """Whole-table reads for a copy from this database."""
        return PostgresTables(self)

    @asynccontextmanager
    async def loading(self) -> AsyncIterator[PostgresTables]:
        """Whole-table writes for a copy into this database, in one transaction that holds
        the episode and fact locks (no other writer meanwhile)."""
        async with self.transaction("episodes") as db:
            await self._lock(db, "facts")
            yield PostgresTables(self, db)

    # --- health -------------------------------------------------------------------------

    async def health(self) -> StoreHealth:
        """Figures from the server (reads only; never creates the schema, never raises)."""
        where = redact(self.url)
        try:
            conn = await self._connect()
        except StoreError as exc:
            return StoreHealth(ok=False, reason=str(exc), path=where)
        try:
            return await self._inspect(PgConn(conn), where)
        except psycopg.Error as exc:
            return StoreHealth(ok=False, reason=f"cannot read the schema: {exc}", path=where)
        finally:
            await conn.close()

    async def _inspect(self, conn: PgConn, where: str) -> StoreHealth:
        ledger = await conn.scalar(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_schema = %s AND table_name = %s",
            (self.schema, LEDGER_TABLE),
        )
        if not ledger:
            return StoreHealth(ok=False, reason="not bootstrapped: no schema ledger", path=where)
        await conn.execute(f'SET search_path = "{self.schema}"')
        version = await self._version(conn)
        if version == 0:
            return StoreHealth(
                ok=False, reason="not bootstrapped: no migration applied", path=where
            )
        episodes = await conn.scalar("SELECT count(*) FROM episodes")
        problem = None
        if version != SCHEMA_VERSION:
            problem = f"schema version is {version}, expected {SCHEMA_VERSION}"
        return StoreHealth(
            ok=problem is None,
            reason=problem,
            path=where,
            schema_version=version,
            episode_count=episodes,
            fragment_count=episodes,
            fact_count=await conn.scalar("SELECT count(*) FROM facts"),
        )
