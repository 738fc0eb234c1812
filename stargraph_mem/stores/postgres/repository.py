"""What the three PostgreSQL repositories share: their database owner and its lifecycle."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stargraph_mem.stores.lifecycle import AsyncResource
from stargraph_mem.stores.models import StoreHealth

if TYPE_CHECKING:
    from stargraph_mem.stores.postgres.database import PostgresDatabase

__all__ = ["PostgresRepository"]


class PostgresRepository(AsyncResource):
    """A store inside a :class:`PostgresDatabase`: statements run on the owner's pool, in
    the owner's transactions; bootstrapping or closing one bootstraps or closes the owner."""

    def __init__(self, database: PostgresDatabase) -> None:
        self.database = database

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
    def file(self) -> None:
        """No SQLite file: ``select`` clauses run over a copy of a pass's episodes."""
        return None

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
