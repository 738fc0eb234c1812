"""What the SQLite stores share: connection helpers and the store lifecycle.

Time conversions (:func:`to_us`, :func:`from_us`) come from :mod:`stargraph_mem.model.time`
and are re-exported here.

:class:`SQLiteStoreBase` owns one lazily opened aiosqlite connection per store, guarded by
an :class:`asyncio.Lock`; a subclass supplies its schema (:meth:`~SQLiteStoreBase._bootstrap`),
the tables :meth:`~SQLiteStoreBase.health` requires and the figures it reports.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import sqlite3
import threading
import time
import weakref
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from queue import SimpleQueue
from typing import Any, ClassVar, Final, TypeVar, cast

import aiosqlite

from stargraph_mem.errors import DamagedDatabaseError, StoreError
from stargraph_mem.model.time import EPOCH, ONE_US, from_us, to_us, utc_now
from stargraph_mem.stores.dialect import Dialect
from stargraph_mem.stores.models import StoreHealth
from stargraph_mem.stores.mounts import network_filesystem_warning
from stargraph_mem.stores.resources import AsyncResource, closed_on_failure
from stargraph_mem.stores.sql_conn import Conn, Insert, Many
from stargraph_mem.stores.sqlite.dialect import SQLITE
from stargraph_mem.stores.sqlite.files import BUSY_TIMEOUT_MS, read_only_reason, sidecar
from stargraph_mem.stores.sqlite.identity import APPLICATION_ID, FILE_VERSION, Identity, identify
from stargraph_mem.stores.sqlite.inline import InlineScope, current_scope

__all__ = [
    "BUSY_TIMEOUT_MS",
    "EPOCH",
    "EXIT_CLOSE_SECONDS",
    "NOT_HERE",
    "ONE_US",
    "SQLiteConn",
    "SQLiteStoreBase",
    "SharedConnection",
    "StoreConnection",
    "fetch",
    "fetch_rows",
    "file_size",
    "from_us",
    "here",
    "open_connection",
    "open_read_only",
    "read_only_reason",
    "read_only_uri",
    "run_rows",
    "run_statement",
    "scalar",
    "stamp",
    "to_us",
    "transaction",
]

T = TypeVar("T")

BUSY_SLICE_MS: Final = 200
"""A write transaction waits for another connection's lock this long at a time (up to
:data:`BUSY_TIMEOUT_MS` in all), so that an interrupted wait ends promptly."""
WAL_AUTOCHECKPOINT_PAGES: Final = 100
"""Checkpoint the write-ahead log once it holds this many pages (SQLite's default: 1000).

The checkpoint runs inside the commit that crosses the threshold. With the default, one
streaming ``record`` in a hundred paid for a checkpoint of about 1000 pages and took twice
as long as the rest; small, frequent checkpoints keep every commit's share short
(``benchmarks/bench_streaming.py``: p99 from about 6.7 ms to about 4 ms, mean +0.1 ms).
Bulk passes are unaffected: their one commit crosses either threshold.
"""


# --- connection -----------------------------------------------------------------------

EXIT_CLOSE_SECONDS: Final = 3.0
"""At interpreter exit, how long the connections nobody closed may take to close (all of
them together); a thread still busy after that is left to end with the process."""

_Requests = SimpleQueue[tuple["asyncio.Future[Any] | None", Callable[[], Any]]]
_STOP = object()
"""What a connection thread's last request returns: the thread ends after it."""
NOT_HERE: Final = object()
"""What :meth:`StoreConnection.run_here` returns when the statement must go to the
connection's thread."""


def _reply(future: asyncio.Future[Any] | None, value: Any, failed: bool) -> None:
    """Hand a request's outcome to the event loop that waits for it, if any still does."""
    if future is None:
        return

    def settle() -> None:
        if not future.done():
            if failed:
                future.set_exception(value)
            else:
                future.set_result(value)

    with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits any more
        future.get_loop().call_soon_threadsafe(settle)


def _serve(requests: _Requests) -> None:
    """A connection's thread: run each request in turn until the one that closes it."""
    while True:
        future, function = requests.get()
        try:
            result = function()
        except BaseException as exc:  # every failure goes back to the caller
            _reply(future, exc, True)
        else:
            _reply(future, result, False)
            if result is _STOP:
                return


_BUSY_TIMEOUT_PRAGMA: Final = "PRAGMA busy_timeout={}"


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` says another connection holds the lock (nothing was done)."""
    return (exc.sqlite_errorcode & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class _Checkpointer:
    """A thread with a connection of its own that copies the write-ahead log into the
    database when asked: a passive checkpoint, which never blocks a writer, so commits
    made on the caller's thread (:func:`~stargraph_mem.stores.sqlite.inline.inline_statements`)
    do not wait for the disk to sync. Commits still checkpoint for themselves once the
    log holds :data:`BEHIND_CHECKPOINTER_PAGES`, so the log stays short if this falls
    behind."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._wake = threading.Event()
        self._stopping = False
        self.checkpoints = 0
        """Checkpoints run so far."""
        self._thread = threading.Thread(
            target=self._serve, name=f"sqlite checkpoints {path}", daemon=True
        )
        self._thread.start()

    def request(self) -> None:
        self._wake.set()

    def _serve(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error:
            return
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                with contextlib.suppress(sqlite3.Error):  # busy: a later one catches up
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
        finally:
            conn.close()

    def stop(self) -> threading.Thread:
        self._stopping = True
        self._wake.set()
        return self._thread


BEHIND_CHECKPOINTER_PAGES: Final = 1000
"""Once a background checkpointer runs, a commit checkpoints for itself only when the log
holds this many pages (SQLite's default; :data:`WAL_AUTOCHECKPOINT_PAGES` otherwise):
measured, commits of streaming records spent twice as long at 100 pages, most of it in
the checkpoints they ran themselves while the background one was also running."""
INLINE_COMMITS_PER_CHECKPOINT: Final = 8
"""Commits made on the caller's thread between two requests for a background checkpoint.
A streaming record makes one, of about 25 pages (its put and its pass commit together):
8 commits leave about 200 pages in the log, well below :data:`BEHIND_CHECKPOINTER_PAGES`.
Measured in one process, alternating blocks of records (``benchmarks/README.md``): a
record that runs while a checkpoint copies pages takes longer, so fewer, larger
checkpoints lower the p50 and raise the p99. Against a request every 4 commits, every 8
gave p50 −3 % and p99 +14 %, every 16 p50 −7 % and p99 +38 % (when a record made two
commits, a request every 16 commits had given p50 −16 % and p99 +16 % against 4)."""


class StoreConnection(aiosqlite.Connection):
    """An aiosqlite connection that never keeps the process alive.

    aiosqlite runs each connection's statements on a thread of its own, which the
    interpreter waits for at exit: a connection nobody closed (a script that ends, or
    raises, before ``close()``) kept the process alive forever. This connection's thread
    is a daemon, and a connection still open at exit is closed on its thread by an
    ``atexit`` hook, which waits at most :data:`EXIT_CLOSE_SECONDS` in all (a statement
    still running then, whose caller is gone, ends with the process: SQLite rolls back
    what it had not committed).

    Leaving a store unclosed loses nothing: the stores work in autocommit mode and each
    write commits (:func:`transaction`) before its call returns, so it is in the database
    (its write-ahead log) whatever happens to the process afterwards. Closing adds a
    checkpoint of that log into the database file, which the next open does otherwise.

    Built on aiosqlite 0.22's connection: it replaces the ``_thread`` that serves the
    ``_tx`` request queue, and :meth:`stop`. Requests whose event loop has closed are
    dropped instead of ending the thread with an error.
    """

    def __init__(
        self, connector: Callable[[], sqlite3.Connection], name: str, path: str | None = None
    ) -> None:
        super().__init__(connector, iter_chunk_size=64)
        self._path = path
        """The file, when it is one a second connection can open (for checkpoints)."""
        self._checkpointer: _Checkpointer | None = None
        self._inline_commits = 0
        self._thread = threading.Thread(target=_serve, args=(self._tx,), name=name, daemon=True)
        self._queued = 0
        """Requests handed to the thread and not answered yet (0: the thread is idle)."""
        self._lowered = False
        """Whether inline statements lowered the busy timeout (see :func:`inline_statements`)."""
        self.deferred: tuple[InlineScope, Redo] | None = None
        """The inline scope whose write transaction is open here, waiting for the scope's
        next transaction to commit it (see :func:`transaction`), and how to do that
        transaction's work again should the joining one fail; meanwhile nothing has been
        handed to the thread."""
        _OPEN.add(self)

    def run_here(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` here, inside :func:`inline_statements` while the connection's
        thread is idle (see there); :data:`NOT_HERE` when it must go to that thread
        instead (outside such a scope, while the thread works, or after a busy refusal)."""
        scope = current_scope()
        if (
            scope is None
            or self._queued
            or self._connection is None
            or not self._running
            or id(self) in scope.refused
        ):
            return NOT_HERE
        if not self._lowered:
            self._connection.execute(_BUSY_TIMEOUT_PRAGMA.format(0))
            self._lowered = True
        try:
            result = fn(*args)
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
            # nothing was done: wait for the lock on the thread, as outside the scope
            scope.refused.add(id(self))
            return NOT_HERE
        if "COMMIT" in args[:2]:  # (sql, …) from aiosqlite, (conn, sql, …) from SQLiteConn
            self._committed_inline()
        return result

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` on the connection's thread; or here, inside :func:`inline_statements`
        while that thread is idle (see there)."""
        result = self.run_here(partial(fn, **kwargs) if kwargs else fn, *args)
        if result is not NOT_HERE:
            return result
        # the timeout is lowered only while the thread is idle and statements run here;
        # it is put back before the thread runs one (which may wait for a lock there),
        # and a transaction waiting for its commit is committed first
        self.commit_deferred()
        self.restore_busy_timeout()
        self._queued += 1
        try:
            return await super()._execute(fn, *args, **kwargs)  # type: ignore[no-untyped-call]
        finally:
            self._queued -= 1

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(connection, *args)`` with the underlying ``sqlite3`` connection, on the
        connection's thread."""
        return cast(T, await self._execute(lambda: fn(self._conn, *args)))

    async def begin(self) -> None:
        """``BEGIN IMMEDIATE`` on the connection's thread, waiting for another
        connection's write lock in slices of :data:`BUSY_SLICE_MS` (the busy timeout in
        all): a caller that stops waiting (SIGINT cancels its task) ends the wait within
        one slice, so closing the connection afterwards is not held up by it."""
        given_up = threading.Event()
        try:
            await self._execute(self._begin_in_slices, given_up)
        except asyncio.CancelledError:
            given_up.set()
            raise

    def _begin_in_slices(self, given_up: threading.Event) -> None:
        """On the connection's thread: ``BEGIN IMMEDIATE`` until it succeeds, the busy
        timeout has passed, or the caller gave up (the last busy error is raised)."""
        conn = self._conn
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        conn.execute(_BUSY_TIMEOUT_PRAGMA.format(BUSY_SLICE_MS))
        try:
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc) or given_up.is_set() or time.monotonic() >= deadline:
                        raise
        finally:
            conn.execute(_BUSY_TIMEOUT_PRAGMA.format(BUSY_TIMEOUT_MS))

    def defer(self, scope: InlineScope, redo: Redo) -> bool:
        """Leave the open write transaction for ``scope``'s next one to commit (``redo``
        does its work again, should that one fail). False (the caller commits) unless the
        thread is idle, as it then stays until the commit (a request handed to it commits
        first)."""
        conn = self._connection
        if self._queued or conn is None or not conn.in_transaction:
            return False
        scope.defer_commit = False
        self.deferred = scope, redo
        scope.deferred = self
        return True

    def commit_deferred(self, scope: InlineScope | None = None) -> None:
        """Commit the transaction :meth:`defer` left open, if any (only ``scope``'s, when
        given; here: the thread is idle). A failed commit rolls it back and raises, here
        and at the end of the scope that left it open."""
        held = self.deferred
        if held is None or (scope is not None and held[0] is not scope):
            return
        self.deferred = None
        conn = self._connection
        if conn is None or not conn.in_transaction:
            return
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            held[0].lose(StoreError(f"{self._path or 'the database'}: a write was lost: {exc}"))
            raise
        self._committed_inline()

    def _committed_inline(self) -> None:
        """Ask for a background checkpoint every few commits made on the caller's thread."""
        self._inline_commits += 1
        if self._inline_commits < INLINE_COMMITS_PER_CHECKPOINT or self._path is None:
            return
        self._inline_commits = 0
        if self._checkpointer is None:
            self._checkpointer = _Checkpointer(self._path)
            # the log is copied in the background from now on: a commit checkpoints for
            # itself only if that falls far behind (it runs here: the thread is idle)
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute(f"PRAGMA wal_autocheckpoint={BEHIND_CHECKPOINTER_PAGES}")
        self._checkpointer.request()

    def _stop_checkpointer(self) -> None:
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.stop().join(EXIT_CLOSE_SECONDS)

    def restore_busy_timeout(self) -> None:
        """Put the busy timeout back if inline statements lowered it (they ran here, so
        the thread is idle)."""
        conn = self._connection
        if self._lowered and conn is not None:
            self._lowered = False
            with contextlib.suppress(sqlite3.Error):
                conn.execute(_BUSY_TIMEOUT_PRAGMA.format(BUSY_TIMEOUT_MS))

    def stop(self) -> asyncio.Future[Any] | None:
        """Queue closing the connection and ending its thread; returns a future to await
        when called from a running event loop (``None`` otherwise: at exit, or when an
        unclosed connection is garbage collected outside a loop)."""
        self._running = False
        try:
            future: asyncio.Future[Any] | None = asyncio.get_running_loop().create_future()
        except RuntimeError:
            future = None
        self._tx.put_nowait((future, self._close_and_stop))
        return future

    def _close_and_stop(self) -> object:
        """On the connection's thread: close it, then end the thread (a connection closed
        by :meth:`close` is closed already; otherwise nobody is left to hear of a failure)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(sqlite3.Error):
                connection.close()
        return _STOP

    async def close(self) -> None:
        try:
            self.commit_deferred()
            if self._checkpointer is not None:
                await asyncio.to_thread(self._stop_checkpointer)
            await super().close()
        finally:
            _OPEN.discard(self)

    def close_at_exit(self) -> threading.Thread | None:
        """Queue the close; returns the thread to wait for (``None``: nothing to close)."""
        if self._connection is None or not self._thread.is_alive():
            return None
        if self._checkpointer is not None:
            self._checkpointer.stop()
        self.stop()
        return self._thread


_OPEN: weakref.WeakSet[StoreConnection] = weakref.WeakSet()
"""Connections not closed yet (a connection garbage collected leaves by itself)."""


@atexit.register
def _close_left_open() -> None:
    """Close the connections nobody closed, waiting at most ``EXIT_CLOSE_SECONDS``."""
    deadline = time.monotonic() + EXIT_CLOSE_SECONDS
    threads = [thread for db in list(_OPEN) if (thread := db.close_at_exit()) is not None]
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _connect(database: str | Path, **kwargs: Any) -> StoreConnection:
    """``aiosqlite.connect`` with a :class:`StoreConnection` (await it, or ``async with``)."""
    # statements may run on the caller's thread (inline_statements), never two at once
    connector = partial(sqlite3.connect, database, check_same_thread=False, **kwargs)
    path = None if kwargs.get("uri") else str(database)
    return StoreConnection(connector, f"sqlite {database}", path)


_TABLE_NAMES: Final = "SELECT name FROM sqlite_master WHERE type = 'table'"
_IDENTITIES: weakref.WeakKeyDictionary[aiosqlite.Connection, Identity] = weakref.WeakKeyDictionary()
"""What each open connection's file was found to be when it opened (before any write)."""
_READ_ONLY: weakref.WeakKeyDictionary[aiosqlite.Connection, str] = weakref.WeakKeyDictionary()
"""Connections opened read-only, with ``path: why`` (for the error a write raises)."""


def read_only_error(where: str, action: str) -> StoreError:
    """``DB is read-only (path: why): cannot <action>``."""
    return StoreError(f"DB is read-only ({where}): cannot {action}", read_only=where)


Redo = Callable[[aiosqlite.Connection], Awaitable[object]]
"""Does a transaction's work again on the connection (inside a new transaction)."""


def transaction(db: aiosqlite.Connection, *, redo: Redo | None = None) -> _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``async with transaction(db) as db``); roll back
    on any exception (then re-raise).

    On a connection opened read-only, raises :class:`StoreError` before beginning.

    Inside :func:`~stargraph_mem.stores.sqlite.inline.inline_statements` with ``defer_commit``,
    the scope's first transaction here that can be done again (``redo``) ends without its
    commit, and the scope's next one on the same connection joins it: on success one
    commit ends both. On failure both are rolled back, then ``redo`` does the first one's
    work again and commits it (a savepoint would keep the first part, but SQLite then
    copies every page the second part changes, which cost more than the commit saved).
    """
    return _Transaction(db, redo)


class _Transaction:
    """:func:`transaction`'s context (a class: a generator-based one costs a few
    microseconds more each time, and a streaming record opens two)."""

    __slots__ = ("_db", "_joined", "_redo")

    def __init__(self, db: aiosqlite.Connection, redo: Redo | None = None) -> None:
        self._db = db
        self._redo = redo
        self._joined: StoreConnection | None = None

    async def __aenter__(self) -> aiosqlite.Connection:
        db = self._db
        where = _READ_ONLY.get(db)
        if where is not None:
            raise read_only_error(where, "write to it")
        if isinstance(db, StoreConnection) and db.deferred is not None:
            if db.deferred[0] is current_scope() and db.in_transaction:
                self._joined = db
                return db
            db.commit_deferred()  # another scope's: committed before this one begins
        if here(db, run_statement, "BEGIN IMMEDIATE", ()) is NOT_HERE:
            await _begin(db)
        return db

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        db = self._db
        joined = self._joined
        if joined is not None:
            if kind is None:
                joined.commit_deferred()  # both parts
            else:
                await _redone(joined, exc)
            return
        if kind is None:
            scope = current_scope()
            if (
                scope is not None
                and scope.defer_commit
                and self._redo is not None
                and isinstance(db, StoreConnection)
                and db.defer(scope, self._redo)
            ):
                return
            try:
                await db.execute("COMMIT")
            except BaseException:
                await _roll_back(db)
                raise
            return
        await _roll_back(db)


async def _redone(db: StoreConnection, exc: BaseException | None) -> None:
    """After a joining transaction failed: roll both back, then do the deferred one's
    work again and commit it (if that fails too, its scope's end says so)."""
    held, db.deferred = db.deferred, None
    await _roll_back(db)
    if held is None:
        return
    scope, redo = held
    try:
        await _begin(db)
        await redo(db)
        await db.execute("COMMIT")
    except Exception as again:
        await _roll_back(db)
        scope.lose(
            StoreError(
                f"{db._path or 'the database'}: a write rolled back with a failed pass "
                f"({exc!r}) could not be done again: {again}"
            )
        )


async def _begin(db: aiosqlite.Connection) -> None:
    """``BEGIN IMMEDIATE`` on the connection's thread (see :meth:`StoreConnection.begin`)."""
    if isinstance(db, StoreConnection):
        await db.begin()
    else:
        await db.execute("BEGIN IMMEDIATE")


async def _roll_back(db: aiosqlite.Connection) -> None:
    if db.in_transaction:
        await db.rollback()


async def fetch(
    db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
) -> list[sqlite3.Row]:
    """All rows of one statement, as a list (aiosqlite types them as an iterable)."""
    rows = here(db, fetch_rows, sql, params)
    if rows is NOT_HERE:
        return list(await db.execute_fetchall(sql, params))
    return cast(list[sqlite3.Row], rows)


async def scalar(db: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row (``None`` when there is no row)."""
    rows = await fetch(db, sql, params)
    return rows[0][0] if rows else None


class SQLiteConn:
    """An aiosqlite connection seen through :class:`~stargraph_mem.stores.sql_conn.Conn`."""

    __slots__ = ("db",)

    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        before = self.db.total_changes
        if here(self.db, run_statement, sql, params) is NOT_HERE:
            await self.db.execute(sql, params)
        return self.db.total_changes - before

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        before = self.db.total_changes
        if not self._rows_here(sql, rows):
            await self.db.executemany(sql, rows)
        return self.db.total_changes - before

    async def insert_many(self, insert: Insert, rows: Sequence[Sequence[Any]]) -> None:
        if not self._rows_here(insert.sql, rows):
            await self.db.executemany(insert.sql, rows)

    async def run_many(self, statement: Many, rows: Sequence[Sequence[Any]]) -> None:
        if not self._rows_here(statement.sql, rows):
            await self.db.executemany(statement.sql, rows)

    def _rows_here(self, sql: str, rows: Sequence[Sequence[Any]]) -> bool:
        """Whether ``rows`` were written on the caller's thread (a plain call, not a
        coroutine: a record makes several of these)."""
        return here(self.db, run_rows, sql, rows) is not NOT_HERE

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        return cast(list[Sequence[Any]], await fetch(self.db, sql, params))

    async def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return await scalar(self.db, sql, params)


def here(db: aiosqlite.Connection, fn: Callable[..., Any], sql: str, params: Any) -> Any:
    """``fn(connection, sql, params)`` (:func:`run_statement`, :func:`run_rows`,
    :func:`fetch_rows`) on the caller's thread when it may run there (see
    :meth:`StoreConnection.run_here`), without aiosqlite's layers; else :data:`NOT_HERE`."""
    if type(db) is not StoreConnection or db._connection is None:
        return NOT_HERE
    return db.run_here(fn, db._connection, sql, params)


def run_statement(conn: sqlite3.Connection, sql: str, params: Any) -> None:
    conn.execute(sql, params)


def run_rows(conn: sqlite3.Connection, sql: str, rows: Any) -> None:
    conn.executemany(sql, rows)


def fetch_rows(conn: sqlite3.Connection, sql: str, params: Any) -> list[Any]:
    """Every row; the statement is reset even when reading fails part way (an unfinished
    one would keep a read snapshot open on the connection)."""
    cursor = conn.execute(sql, params)
    try:
        return cursor.fetchall()
    finally:
        cursor.close()


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
    """Open ``path`` (creating parent folders) in autocommit mode with the stores' pragmas.

    The file is identified first (:func:`~stargraph_mem.stores.sqlite.identity.identify`):
    another program's file, or one of a newer version, is refused before anything is
    written to it. If a pragma fails the connection is closed before the error propagates.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    db = await _connect(path, isolation_level=None)
    async with closed_on_failure(db.close):
        await db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        await _identify(db, path)  # before the first write
        await _enable_wal(db)
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
    return db


async def _identify(db: aiosqlite.Connection, path: Path) -> None:
    """Decide whether the file is ours, before anything is written to it (see
    :mod:`~stargraph_mem.stores.sqlite.identity`); what was found is kept for the stores."""
    assert isinstance(db, StoreConnection)
    _IDENTITIES[db] = await db.call(identify, path)


async def stamp(db: aiosqlite.Connection) -> None:
    """Mark the file as ours, at this version's layout (inside the caller's write
    transaction, which the header change joins)."""
    if await scalar(db, "PRAGMA application_id") != APPLICATION_ID:
        await db.execute(f"PRAGMA application_id={APPLICATION_ID}")
    if int(await scalar(db, "PRAGMA user_version")) < FILE_VERSION:
        await db.execute(f"PRAGMA user_version={FILE_VERSION}")


def read_only_uri(path: Path) -> str:
    """A URI that reads ``path`` without writing it or creating files beside it.

    With a ``-wal`` (a writer has the database open, or did not finish) or a rollback
    ``-journal`` beside it, ``mode=ro`` reads through them; otherwise ``immutable=1``
    reads the file alone (``mode=ro`` on a WAL database would need to create ``-shm``,
    which a read-only folder does not allow).
    """
    uri = path.resolve().as_uri()
    live = any(sidecar(path, suffix).exists() for suffix in ("-wal", "-journal"))
    return f"{uri}?mode=ro" if live else f"{uri}?mode=ro&immutable=1"


async def open_read_only(path: Path, why: str) -> aiosqlite.Connection:
    """Open an existing ``path`` for reading only (``why``: the reason, for errors).

    Nothing is written: no journal mode switch, no schema; a write through
    :func:`transaction` raises ``DB is read-only (path: why): cannot …``.
    """
    where = f"{path}: {why}"
    if not path.is_file():
        raise StoreError(f"{path}: database file does not exist", read_only=where)
    try:
        db = await _connect(read_only_uri(path), uri=True, isolation_level=None)
        async with closed_on_failure(db.close):
            await db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            await db.execute("PRAGMA query_only=ON")
            await _identify(db, path)
    except sqlite3.Error as exc:
        hint = ""
        if sidecar(path, "-wal").exists() and not sidecar(path, "-shm").exists():
            hint = f" (reading {path.name}-wal needs a {path.name}-shm beside it)"
        raise StoreError(f"cannot read {where}: {exc}{hint}", read_only=where) from exc
    _READ_ONLY[db] = where
    return db


def file_size(path: Path) -> int | None:
    """File size in bytes, or ``None`` when it cannot be read."""
    try:
        return path.stat().st_size
    except OSError:
        return None


async def _nothing() -> None:
    """A close with nothing to close (a shared connection that was already open)."""


class SharedConnection:
    """One SQLite file's connection, opened on first use, with the lock that serialises
    its users: a store's own, or one shared by the repositories of a database
    (:class:`~stargraph_mem.stores.database.SQLiteDatabase`), so they can work inside
    one transaction."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db: aiosqlite.Connection | None = None
        self.lock = asyncio.Lock()
        self.read_only: bool | None = None
        self.read_only_reason: str | None = None
        self.ready: weakref.WeakSet[SQLiteStoreBase] = weakref.WeakSet()
        """The stores whose schema was bootstrapped (or checked) on the open connection."""
        self.members: list[weakref.ref[SQLiteStoreBase]] = []
        """The stores that use this connection: whichever one is prepared first checks the
        tables of all of them for damage (a command that uses one store still refuses a
        damaged file)."""

    def _why(self) -> str | None:
        """Why the next connection opens read-only (``None``: read-write)."""
        if self.read_only is None:
            return read_only_reason(self.path)
        return "opened read-only" if self.read_only else None

    async def open(self) -> aiosqlite.Connection:
        """The connection, opened now if it is not (call with :attr:`lock` held)."""
        if self.db is None:
            why = self._why()
            self.db = await (
                open_connection(self.path) if why is None else open_read_only(self.path, why)
            )
            self.read_only_reason = why
        return self.db

    async def close_now(self) -> None:
        """Close the connection (call with :attr:`lock` held, or when nobody else uses it)."""
        db, self.db = self.db, None
        self.read_only_reason = None
        self.ready = weakref.WeakSet()
        if db is not None:
            await db.close()

    async def close(self) -> None:
        """Close the connection once its current user is done (a later use reopens it)."""
        async with self.lock:
            await self.close_now()


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
    _added_later: ClassVar[tuple[str, ...]] = ()
    """Tables files of older versions may lack (the bootstrap creates them there); a file
    stamped with this version's layout has them whenever it has the store's others."""
    _store_name: ClassVar[str] = "store"
    """How messages name the store (``memory``, ``fact``, ``schedule``)."""
    dialect: ClassVar[Dialect] = SQLITE
    """The SQL the shared repositories render for this backend."""
    _conn_type: ClassVar[type[SQLiteConn]] = SQLiteConn
    """How the shared repositories see the connection."""
    _kinds: ClassVar[list[type[SQLiteStoreBase]]] = []
    """Every store class with tables: a file is stamped as this version's layout only
    when each store it holds has all of its tables."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls._tables:
            SQLiteStoreBase._kinds.append(cls)

    @classmethod
    def _all_tables(cls) -> tuple[str, ...]:
        """The tables of this version's layout of the store."""
        return (*cls._tables, *(t for t in cls._added_later if t not in cls._tables))

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], datetime] = utc_now,
        shared: SharedConnection | None = None,
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self._slot = shared if shared is not None else SharedConnection(self.path)
        """The connection this store uses: its own, or its database's (see
        :class:`SharedConnection`)."""
        self._owned = shared is None
        self._slot.members.append(weakref.ref(self))

    @property
    def location(self) -> str:
        """What :func:`~stargraph_mem.stores.database.open_database` reopens this
        database from (the file's path)."""
        return str(self.path)

    @property
    def _db(self) -> aiosqlite.Connection | None:
        return self._slot.db

    @property
    def _lock(self) -> asyncio.Lock:
        return self._slot.lock

    @property
    def read_only(self) -> bool | None:
        """``True`` opens the file read-only, ``False`` read-write; ``None`` (the default)
        opens it read-only when it cannot be written (:func:`read_only_reason`)."""
        return self._slot.read_only

    @read_only.setter
    def read_only(self, value: bool | None) -> None:
        self._slot.read_only = value

    @property
    def read_only_reason(self) -> str | None:
        """Why the open connection is read-only; ``None`` when it is writable or closed."""
        return self._slot.read_only_reason

    async def close(self) -> None:
        """Close the connection (a later call reopens it); a shared connection is closed
        by its owner instead."""
        if self._owned:
            await self._slot.close()

    def _now_us(self) -> int:
        """The injected clock as UTC microseconds; a naive clock value raises."""
        return to_us(self._clock(), "clock()")

    async def _ready(self) -> aiosqlite.Connection:
        """The open connection, with this store's schema bootstrapped (opened on first
        use). Call with the lock held.

        A read-only file is not bootstrapped: its schema must be there already. Whatever
        fails after the connection opened closes it before the error propagates.
        """
        slot = self._slot
        opened = slot.db is None
        db = await slot.open()
        if self not in slot.ready:
            async with closed_on_failure(slot.close_now if opened else _nothing):
                for pragma in self._pragmas:
                    await db.execute(pragma)
                await self._prepare(db)
            slot.ready.add(self)
        return db

    async def _prepare(self, db: aiosqlite.Connection) -> None:
        """Refuse a damaged schema (of any store on this connection), then bootstrap this
        store's (or, read-only, check it)."""
        for member in self._slot.members:
            store = member()
            if store is not None:
                await store._check_intact(db)
        why = self._slot.read_only_reason
        if why is None:
            await self._bootstrap(db)
        else:
            await self._check_schema(db, why)

    @property
    def _stamped(self) -> bool:
        """Whether the file carried our application id when the connection opened."""
        db = self._slot.db
        identity = None if db is None else _IDENTITIES.get(db)
        return identity is not None and identity.stamped

    async def _required_tables(self, db: aiosqlite.Connection) -> tuple[str, ...]:
        """The tables the file must have, given that it has some of the store's."""
        if self._stamped:
            return self._all_tables()
        return tuple(t for t in self._tables if t not in self._added_later)

    async def _check_intact(self, db: aiosqlite.Connection) -> None:
        """A store whose tables are partly there is damaged: say which are missing
        (creating them empty would hide the loss); none there means a new store."""
        names = {row[0] for row in await fetch(db, _TABLE_NAMES)}
        if not any(t in names for t in (*self._tables, *self._added_later)):
            return
        missing = [t for t in await self._required_tables(db) if t not in names]
        if missing:
            raise DamagedDatabaseError(
                f"{self.path} is damaged: the {self._store_name} store's table(s) "
                f"{', '.join(missing)} are missing while its other tables are there "
                "(they are not recreated empty: restore the file from a backup)",
                missing=missing,
            )

    async def _check_schema(self, db: aiosqlite.Connection, why: str) -> None:
        """A read-only file must hold the store's tables: they cannot be created."""
        names = {row[0] for row in await fetch(db, "SELECT name FROM sqlite_master")}
        missing = [table for table in self._tables if table not in names]
        if missing:
            action = f"create the missing table(s) {', '.join(missing)}"
            error = read_only_error(f"{self.path}: {why}", action)
            error.context["missing"] = missing
            raise error

    async def _stamp_if_complete(self, db: aiosqlite.Connection) -> None:
        """Stamp the file (:func:`stamp`) once every store it holds has all of its tables
        (at the end of a bootstrap transaction)."""
        names = {row[0] for row in await fetch(db, _TABLE_NAMES)}
        for kind in self._kinds:
            tables = kind._all_tables()
            if any(t in names for t in tables) and not all(t in names for t in tables):
                return
        await stamp(db)

    @abstractmethod
    async def _bootstrap(self, db: aiosqlite.Connection) -> None:
        """Create the schema and its initial rows (IF NOT EXISTS: idempotent)."""

    def _read(self) -> _Holding:
        """The connection, held exclusively by this coroutine (autocommit reads)."""
        return _Holding(self, write=False)

    def _write(self, *, redo: Redo | None = None) -> _Holding:
        """The connection inside a ``BEGIN IMMEDIATE`` transaction held by this coroutine
        (``redo``: see :func:`transaction`)."""
        return _Holding(self, write=True, redo=redo)

    def _reading(self) -> _Seen:
        """:meth:`_read` for the shared repositories: the connection as a ``Conn``."""
        return _Seen(self, write=False)

    def _writing(
        self, lock: str | None = None, redo: Callable[[Conn], Awaitable[object]] | None = None
    ) -> _Seen:
        """:meth:`_write` for the shared repositories (one writer: ``lock`` is not needed)."""
        if redo is None:
            return _Seen(self, write=True)
        wrap = self._conn_type

        async def again(db: aiosqlite.Connection) -> object:
            return await redo(wrap(db))

        return _Seen(self, write=True, redo=again)

    # --- lifecycle ----------------------------------------------------------------------

    async def bootstrap(self) -> None:
        """Create folders, tables, indexes and the schema's initial rows; idempotent.

        A file that cannot be written is opened read-only instead (see :attr:`read_only`)
        and only checked: every table must exist.
        """
        async with self._lock:
            if self._db is None or self not in self._slot.ready:
                await self._ready()
            else:
                await self._prepare(self._db)

    async def health(self) -> StoreHealth:
        """Real figures from a look at the file (reads only); never creates it, never raises.

        ``warnings`` names what is unsafe but works, e.g. the file on a network filesystem.
        """
        found = await self._health()
        warning = network_filesystem_warning(self.path)
        if warning is None:
            return found
        return found.model_copy(update={"warnings": (*found.warnings, warning)})

    async def _health(self) -> StoreHealth:
        path = self.path
        if not path.is_file():
            what = "does not exist" if not path.exists() else "is not a regular file"
            return StoreHealth(ok=False, reason=f"database file {what}", path=str(path))
        try:
            # mode=rw never creates the file, and unlike mode=ro it removes the -wal/-shm
            # files on close; health only ever reads.
            writable = read_only_reason(path) is None
            uri = f"{path.resolve().as_uri()}?mode=rw" if writable else read_only_uri(path)
            async with _connect(uri, uri=True) as db:
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


class _Holding:
    """``async with store._read()`` / ``store._write()``: the store's lock held, its
    connection ready (and, to write, inside :func:`transaction`)."""

    __slots__ = ("_redo", "_store", "_transaction", "_write")

    def __init__(self, store: SQLiteStoreBase, *, write: bool, redo: Redo | None = None) -> None:
        self._store = store
        self._write = write
        self._redo = redo
        self._transaction: _Transaction | None = None

    async def __aenter__(self) -> aiosqlite.Connection:
        lock = self._store._lock
        await lock.acquire()
        try:
            db = await self._store._ready()
            if self._write:
                self._transaction = _Transaction(db, self._redo)
                await self._transaction.__aenter__()
        except BaseException:
            lock.release()
            raise
        return db

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        try:
            if self._transaction is not None:
                await self._transaction.__aexit__(kind, exc, tb)
        finally:
            self._store._lock.release()


class _Seen(_Holding):
    """:class:`_Holding` whose connection is seen through the store's ``Conn``."""

    __slots__ = ()

    async def __aenter__(self) -> SQLiteConn:  # type: ignore[override]
        return self._store._conn_type(await super().__aenter__())
