"""What a backend hands the repositories written once: its dialect and its connections.

A repository (:mod:`.episodes`, :mod:`.schedule`) holds the SQL and the logic; the
backend's store class mixes it in and supplies these members, so the same methods run on
SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import ClassVar, Protocol

from stargraph_mem.stores.dialect import Dialect
from stargraph_mem.stores.sql_conn import Conn

__all__ = ["Access", "Redo"]

Redo = Callable[[Conn], Awaitable[object]]
"""Does a write transaction's work again (SQLite: after a joined commit failed)."""


class Access(Protocol):
    """The backend's side of a repository."""

    dialect: ClassVar[Dialect]

    @property
    def read_only_reason(self) -> str | None: ...

    def _now_us(self) -> int: ...

    def _reading(self) -> AbstractAsyncContextManager[Conn]:
        """A connection for reads (autocommit), held by this coroutine."""
        ...

    def _writing(
        self, lock: str | None = None, redo: Redo | None = None
    ) -> AbstractAsyncContextManager[Conn]:
        """A connection inside one write transaction; ``lock`` names what it serialises
        (PostgreSQL's advisory lock), ``redo`` redoes its work (SQLite, see there)."""
        ...
