"""Small work done on the caller's thread.

A streaming ``record`` is a handful of small statements and one small pass. Handing each
statement to a connection thread, and the pass to a worker thread, costs two thread
switches a time: more than the statement or the pass. Inside :func:`inline_statements`
the SQLite stores run their statements on the calling thread while the connection's own
thread is idle, and the engine runs a small pass there too. PostgreSQL stores are not
affected (their driver has no thread to skip).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Protocol

__all__ = ["InlineScope", "current_scope", "inline_statements"]


class _Deferring(Protocol):
    def commit_deferred(self, scope: InlineScope | None = None) -> None: ...


class InlineScope:
    """What one :func:`inline_statements` scope asked for and found: whether its first
    write transaction leaves its commit to the next one, the connection holding such a
    transaction, what went wrong committing one, and the connections that found the file
    locked."""

    __slots__ = ("defer_commit", "deferred", "lost", "refused")

    def __init__(self, defer_commit: bool = False) -> None:
        self.defer_commit = defer_commit
        """Whether the scope's next write transaction that runs here ends without its
        commit, for the scope's next transaction on the same connection to join (see
        :func:`~stargraph_mem.stores.sqlite.connection.transaction`)."""
        self.deferred: _Deferring | None = None
        """The connection holding the transaction of this scope whose commit waits."""
        self.lost: Exception | None = None
        """Why such a transaction was rolled back instead of committed (raised at the
        scope's end)."""
        self.refused: set[int] = set()
        """Connections (by id) that found the file locked: the rest of the scope queues
        their statements, which wait for the lock on the connection's thread as usual."""

    def lose(self, error: Exception) -> None:
        """Note that the transaction this scope left open is lost (the first reason
        stays)."""
        if self.lost is None:
            self.lost = error


_SCOPE: contextvars.ContextVar[InlineScope | None] = contextvars.ContextVar(
    "stargraph_inline", default=None
)


def current_scope() -> InlineScope | None:
    """The scope this task runs in, if any."""
    return _SCOPE.get()


@contextmanager
def inline_statements(*, defer_commit: bool = False) -> Iterator[None]:
    """Run this task's SQLite statements, and its small passes, on the calling thread
    while the scope lasts.

    A statement runs here only while its connection's thread is idle (nothing queued on
    it), so the two never use the connection at once; a statement that finds the file
    locked by another writer is queued instead, and waits there. A connection that ran
    statements here keeps a busy timeout of zero (nothing waits for a lock on the calling
    thread) until the next statement handed to its own thread, which puts the timeout
    back first: statements wait for locks only there.

    With ``defer_commit`` (a streaming record), the scope's first write transaction that
    runs here and can be done again (the put) is left open, and the scope's next write
    transaction on that connection (the pass) joins it: one commit instead of two. If the
    joining part fails, both are rolled back and the first one's work is done again and
    committed on its own (see :func:`~stargraph_mem.stores.sqlite.connection.transaction`).
    Anything else that uses the connection first (a statement another task queues,
    another transaction) commits the open one, and so does the scope's end.
    """
    scope = InlineScope(defer_commit)
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)
        if scope.deferred is not None:
            with suppress(Exception):  # a failure is kept as scope.lost
                scope.deferred.commit_deferred(scope)
        if scope.lost is not None:
            raise scope.lost
