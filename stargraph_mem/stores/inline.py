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
from contextlib import contextmanager

__all__ = ["InlineScope", "current_scope", "inline_statements"]


class InlineScope:
    """What one :func:`inline_statements` scope found: the connections that found the file
    locked."""

    __slots__ = ("refused",)

    def __init__(self) -> None:
        self.refused: set[int] = set()
        """Connections (by id) that found the file locked: the rest of the scope queues
        their statements, which wait for the lock on the connection's thread as usual."""


_SCOPE: contextvars.ContextVar[InlineScope | None] = contextvars.ContextVar(
    "stargraph_inline", default=None
)


def current_scope() -> InlineScope | None:
    """The scope this task runs in, if any."""
    return _SCOPE.get()


@contextmanager
def inline_statements() -> Iterator[None]:
    """Run this task's SQLite statements, and its small passes, on the calling thread
    while the scope lasts.

    A statement runs here only while its connection's thread is idle (nothing queued on
    it), so the two never use the connection at once; a statement that finds the file
    locked by another writer is queued instead, and waits there. A connection that ran
    statements here keeps a busy timeout of zero (nothing waits for a lock on the calling
    thread) until the next statement handed to its own thread, which puts the timeout
    back first: statements wait for locks only there.
    """
    token = _SCOPE.set(InlineScope())
    try:
        yield
    finally:
        _SCOPE.reset(token)
