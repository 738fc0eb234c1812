"""What the SQLite stores share: connection helpers, time conversions and the store lifecycle.

:class:`SQLiteStoreBase` owns one lazily opened aiosqlite connection per store, guarded by
an :class:`asyncio.Lock`; a subclass supplies its schema (:meth:`~SQLiteStoreBase._bootstrap`),
the tables :meth:`~SQLiteStoreBase.health` requires and the figures it reports.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Final

import aiosqlite

from stargraph_mem.stores.lifecycle import AsyncResource
from stargraph_mem.stores.models import StoreHealth, utc_now

__all__ = [
    "BUSY_TIMEOUT_MS",
    "EPOCH",
    "ONE_US",
    "SQLiteStoreBase",
    "fetch",
    "file_size",
    "from_us",
    "open_connection",
    "scalar",
    "to_us",
    "transaction",
]

BUSY_TIMEOUT_MS: Final = 30_000
WAL_AUTOCHECKPOINT_PAGES: Final = 100
"""Checkpoint the write-ahead log once it holds this many pages (SQLite's default: 1000).

The checkpoint runs inside the commit that crosses the threshold. With the default, one
streaming ``record`` in a hundred paid for a checkpoint of about 1000 pages and took twice
as long as the rest; small, frequent checkpoints keep every commit's share short
(``benchmarks/bench_streaming.py``: p99 from about 6.7 ms to about 4 ms, mean +0.1 ms).
Bulk passes are unaffected: their one commit crosses either threshold.
"""
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
ONE_US: Final = timedelta(microseconds=1)


# --- conversions ----------------------------------------------------------------------


def to_us(value: datetime, what: str = "timestamp") -> int:
    """UTC microseconds since the epoch (exact integer arithmetic); naive values are refused."""
    if value.utcoffset() is None:
        raise ValueError(f"{what} is a naive datetime: a timezone-aware datetime is required")
    return (value - EPOCH) // ONE_US


@lru_cache(maxsize=256)
def _offset_tz(offset_s: int) -> timezone:
    """A fixed-offset zone (cached: episodes share a handful of offsets)."""
    return UTC if offset_s == 0 else timezone(timedelta(seconds=offset_s))


def from_us(ts_us: int, offset_s: int = 0) -> datetime:
    """Inverse of :func:`to_us`, expressed in the given UTC offset (seconds)."""
    return (EPOCH + timedelta(microseconds=ts_us)).astimezone(_offset_tz(offset_s))


# --- connection -----------------------------------------------------------------------


@asynccontextmanager
async def transaction(db: aiosqlite.Connection) -> AsyncIterator[aiosqlite.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; roll back on any exception (then re-raise)."""
    await db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        await db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            await db.rollback()
        raise


async def fetch(
    db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> list[sqlite3.Row]:
    """All rows of one statement, as a list (aiosqlite types them as an iterable)."""
    return list(await db.execute_fetchall(sql, params))


async def scalar(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row (``None`` when there is no row)."""
    rows = await fetch(db, sql, params)
    return rows[0][0] if rows else None


async def _enable_wal(db: aiosqlite.Connection) -> None:
    """Switch to WAL; the switch needs a moment alone with the file, so retry while busy."""
    for attempt in range(200):
        try:
            await db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == 199:
                raise
            await asyncio.sleep(0.05)


async def open_connection(path: Path) -> aiosqlite.Connection:
    """Open ``path`` (creating parent folders) in autocommit mode with the stores' pragmas."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = await aiosqlite.connect(path, isolation_level=None)
    try:
        await db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        await _enable_wal(db)
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
    except BaseException:
        await db.close()
        raise
    return db


def file_size(path: Path) -> int | None:
    """File size in bytes, or ``None`` when it cannot be read."""
    try:
        return path.stat().st_size
    except OSError:
        return None


# --- the store lifecycle --------------------------------------------------------------


class SQLiteStoreBase(AsyncResource):
    """One SQLite file, one connection opened (and bootstrapped) on first use.

    Use ``async with Store(path=...) as store``; any first call also opens and bootstraps,
    and a call after :meth:`close` reopens. ``clock`` (tz-aware) is the store's notion of now.
    Subclasses implement :meth:`_bootstrap` and :meth:`_figures` and name their
    ``_tables``; ``_pragmas`` run on every newly opened connection before the bootstrap.
    """

    _pragmas: ClassVar[tuple[str, ...]] = ()
    """Extra statements run on each new connection, after the shared pragmas."""
    _tables: ClassVar[tuple[str, ...]] = ()
    """The tables a bootstrapped file has; :meth:`health` names those missing, in this order."""

    def __init__(self, path: str | Path, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.path = Path(path)
        self._clock = clock
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        """Close the connection (a later call reopens it)."""
        async with self._lock:
            if self._db is not None:
                db, self._db = self._db, None
                await db.close()

    def _now_us(self) -> int:
        """The injected clock as UTC microseconds; a naive clock value raises."""
        return to_us(self._clock(), "clock()")

    async def _ready(self) -> aiosqlite.Connection:
        """The open, bootstrapped connection (opened on first use). Call with the lock held."""
        if self._db is None:
            db = await open_connection(self.path)
            try:
                for pragma in self._pragmas:
                    await db.execute(pragma)
                await self._bootstrap(db)
            except BaseException:
                await db.close()
                raise
            self._db = db
        return self._db

    @abstractmethod
    async def _bootstrap(self, db: aiosqlite.Connection) -> None:
        """Create the schema and its initial rows (IF NOT EXISTS: idempotent)."""

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[aiosqlite.Connection]:
        """The connection, held exclusively by this coroutine (autocommit reads)."""
        async with self._lock:
            yield await self._ready()

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        """The connection inside a ``BEGIN IMMEDIATE`` transaction held by this coroutine."""
        async with self._lock, transaction(await self._ready()) as db:
            yield db

    # --- lifecycle ----------------------------------------------------------------------

    async def bootstrap(self) -> None:
        """Create folders, tables, indexes and the schema's initial rows; idempotent."""
        async with self._lock:
            if self._db is None:
                await self._ready()
            else:
                await self._bootstrap(self._db)

    async def health(self) -> StoreHealth:
        """Real figures from a look at the file (reads only); never creates it, never raises."""
        path = self.path
        if not path.is_file():
            what = "does not exist" if not path.exists() else "is not a regular file"
            return StoreHealth(ok=False, reason=f"database file {what}", path=str(path))
        try:
            # mode=rw never creates the file, and unlike mode=ro it removes the -wal/-shm
            # files on close; health only ever reads.
            mode = "rw" if os.access(path, os.W_OK) else "ro"
            uri = f"{path.resolve().as_uri()}?mode={mode}"
            async with aiosqlite.connect(uri, uri=True) as db:
                return await self._inspect(db, path)
        except (sqlite3.Error, OSError) as exc:
            reason = f"not a usable SQLite database: {exc}"
            return StoreHealth(ok=False, reason=reason, path=str(path), file_size=file_size(path))

    async def _inspect(self, db: aiosqlite.Connection, path: Path) -> StoreHealth:
        """Read the real figures from an open connection (reads only)."""
        tables = {row[0] for row in await fetch(db, "SELECT name FROM sqlite_master")}
        journal = str(await scalar(db, "PRAGMA journal_mode"))
        quick = "; ".join(str(row[0]) for row in await fetch(db, "PRAGMA quick_check"))
        base = StoreHealth(
            ok=False,
            path=str(path),
            journal_mode=journal,
            quick_check=quick,
            file_size=file_size(path),
        )
        missing = [table for table in self._tables if table not in tables]
        if missing:
            reason = f"not bootstrapped: missing table(s) {', '.join(missing)}"
            return base.model_copy(update={"reason": reason})
        figures = await self._figures(db)
        problem = None
        if quick != "ok":
            problem = f"quick_check failed: {quick}"
        elif journal.lower() != "wal":
            problem = f"journal mode is {journal}, expected wal"
        return base.model_copy(update={"ok": problem is None, "reason": problem, **figures})

    @abstractmethod
    async def _figures(self, db: aiosqlite.Connection) -> dict[str, Any]:
        """The store's own :class:`StoreHealth` fields, read from a bootstrapped file."""
