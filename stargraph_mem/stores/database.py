"""The database owner: one object per memory that owns connections and transactions.

A memory lives in one database, named by a URL: a plain path or ``sqlite:///…`` (the
embedded default, one SQLite file) or ``postgresql://…`` (a server shared by many
workers). :func:`open_database` returns its owner, whose three repositories (``memory``
for episodes, ``facts`` for facts, lineage, audit and watermarks, ``schedule`` for
cadence state and leases) work on the owner's connections; the engine only ever sees
the repositories' Protocols (:mod:`stargraph_mem.stores.protocols`).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, Literal
from urllib.parse import urlsplit, urlunsplit

import aiosqlite

from stargraph_mem.errors import StoreConfigError
from stargraph_mem.model.time import utc_now
from stargraph_mem.stores.lifecycle import AsyncResource, closed_on_failure
from stargraph_mem.stores.protocols import Database
from stargraph_mem.stores.sqlite_base import SharedConnection, transaction
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore
from stargraph_mem.stores.sqlite_schedule import SQLiteScheduleStore

__all__ = [
    "DatabaseURL",
    "SQLiteDatabase",
    "open_database",
    "parse_database_url",
]

Backend = Literal["sqlite", "postgresql"]

_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
_POSTGRES_SCHEMES: Final = frozenset({"postgresql", "postgres"})
EXAMPLES: Final = "a path, 'sqlite:///abs/path.db', 'sqlite:rel/path.db' or 'postgresql://host/db'"


@dataclass(frozen=True, slots=True)
class DatabaseURL:
    """Where a memory lives: ``backend`` and, for SQLite, the file ``path``; ``url`` is
    what the user wrote (PostgreSQL: the connection URL)."""

    backend: Backend
    url: str
    path: Path | None = None

    def __str__(self) -> str:
        """The location for messages: the path, or the URL without its password."""
        if self.path is not None:
            return str(self.path)
        return redact(self.url)


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))


def _bad(value: object, why: str) -> StoreConfigError:
    return StoreConfigError(f"database {value!r}: {why}", key="db", value=str(value))


def parse_database_url(value: str | Path) -> DatabaseURL:
    """Read a database location: a plain path, ``sqlite:``/``sqlite:///`` or
    ``postgresql://``/``postgres://``; anything else raises :class:`StoreConfigError`."""
    if isinstance(value, Path):
        return DatabaseURL("sqlite", str(value), value)
    if not isinstance(value, str) or not value.strip():
        raise _bad(value, f"expected {EXAMPLES}")
    scheme = _SCHEME.match(value)
    if scheme is None:
        path = Path(value).expanduser()
        return DatabaseURL("sqlite", value, path)
    name = scheme.group(1).lower()
    if name in _POSTGRES_SCHEMES:
        parts = urlsplit(value)
        if not parts.netloc and not parts.path.strip("/") and not parts.query:
            raise _bad(value, "no server or database after 'postgresql://'")
        return DatabaseURL("postgresql", value)
    if name != "sqlite":
        raise _bad(value, f"unsupported scheme {scheme.group(1)!r} (use {EXAMPLES})")
    rest = value[scheme.end() :]
    if rest.startswith("//"):
        if not rest.startswith("///"):
            raise _bad(value, "a host is not supported for SQLite: write 'sqlite:///abs/path'")
        rest = rest[2:]
    if not rest:
        raise _bad(value, "no path after 'sqlite:'")
    return DatabaseURL("sqlite", value, Path(rest).expanduser())


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
    ) -> None:
        self.path = Path(path)
        self.location = DatabaseURL("sqlite", str(path), self.path)
        self.connection = SharedConnection(self.path)
        self.connection.read_only = read_only
        self.memory = SQLiteMemoryStore(self.path, clock=clock, shared=self.connection)
        self.facts = SQLiteFactStore(self.path, clock=clock, shared=self.connection)
        self.schedule = SQLiteScheduleStore(self.path, clock=clock, shared=self.connection)

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

    async def close(self) -> None:
        """Finish the fact store's background work, then close the connection."""
        try:
            await self.facts.close()
        finally:
            await self.connection.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """The shared connection inside one write transaction, held by this coroutine."""
        async with self.connection.lock:
            db = await self.connection.open()
            async with transaction(db):
                yield db


def open_database(
    location: str | Path | DatabaseURL,
    *,
    clock: Callable[[], datetime] = utc_now,
    read_only: bool | None = None,
) -> Database:
    """The owner of the database at ``location`` (nothing is opened until
    ``async with`` or ``bootstrap``)."""
    url = location if isinstance(location, DatabaseURL) else parse_database_url(location)
    if url.backend == "sqlite":
        assert url.path is not None
        return SQLiteDatabase(url.path, clock=clock, read_only=read_only)
    raise _bad(str(url), "PostgreSQL support is not available in this build")
