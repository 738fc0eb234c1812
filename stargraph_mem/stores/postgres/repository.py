"""What the three PostgreSQL repositories share: their database owner and its lifecycle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, ClassVar

from stargraph_mem.stores.dialect import Dialect
from stargraph_mem.stores.models import StoreHealth
from stargraph_mem.stores.postgres.connection import PgConn
from stargraph_mem.stores.postgres.dialect import POSTGRES
from stargraph_mem.stores.resources import AsyncResource
from stargraph_mem.stores.sql_conn import Conn

if TYPE_CHECKING:
    from stargraph_mem.stores.postgres.owner import PgOwner

__all__ = ["PostgresRepository"]


class PostgresRepository(AsyncResource):
    """A store inside a :class:`PostgresDatabase`: statements run on the owner's pool, in
    the owner's transactions; bootstrapping or closing one bootstraps or closes the owner."""

    dialect: ClassVar[Dialect] = POSTGRES
    """The SQL the shared repositories render for this backend."""

    def __init__(self, database: PgOwner) -> None:
        self.database = database

    def _now_us(self) -> int:
        return self.database.now_us()

    def _reading(self) -> AbstractAsyncContextManager[PgConn]:
        """A pooled connection in autocommit mode."""
        return self.database.connection()

    def _writing(
        self, lock: str | None = None, redo: Callable[[Conn], Awaitable[object]] | None = None
    ) -> AbstractAsyncContextManager[PgConn]:
        """A pooled connection inside one transaction holding the advisory lock ``lock``
        (``redo`` is SQLite's: nothing here defers a commit)."""
        return self.database.transaction(lock)

    @property
    def path(self) -> str:
        """Where the store lives (the URL without password), as SQLite's ``path``."""
        return self.database.where

    @property
    def location(self) -> str:
        """What :func:`~stargraph_mem.stores.database.open_database` reopens this
        database from (another process's view of it: the full URL)."""
        return self.database.url

    @property
    def read_only_reason(self) -> str | None:
        """Always ``None`` (see :attr:`PostgresDatabase.read_only_reason`)."""
        return None

    async def bootstrap(self) -> None:
        """Create or migrate the database's schema; idempotent."""
        await self.database.bootstrap()

    async def close(self) -> None:
        """Close the database's pool (a later call reopens it)."""
        await self.database.close()

    async def health(self) -> StoreHealth:
        """Figures from the server (see :meth:`PostgresDatabase.health`)."""
        return await self.database.health()
