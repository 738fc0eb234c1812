"""Entities over SQLite: the entity tables in the memory's file, on its shared connection.

The reads and writes are :class:`~stargraph_mem.stores.repositories.entities.Entities`; this
module creates the tables. The graph reads also read the episode and fact tables, so the
stores holding them are made ready first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from stargraph_mem.model.time import utc_now
from stargraph_mem.stores.repositories.entities import (
    ENTITY_TABLES,
    SQLITE_ENTITY_TABLES,
    Entities,
    NameCache,
)
from stargraph_mem.stores.sqlite.connection import (
    SharedConnection,
    SQLiteStoreBase,
    transaction,
)

__all__ = ["SQLiteEntityStore"]


class SQLiteEntityStore(Entities, SQLiteStoreBase):
    """Entities and graph reads, in the same file as the other stores."""

    _tables = ENTITY_TABLES
    _added_later = ENTITY_TABLES
    _store_name = "entity"

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], datetime] = utc_now,
        shared: SharedConnection | None = None,
        needs: Sequence[SQLiteStoreBase] = (),
    ) -> None:
        super().__init__(path, clock=clock, shared=shared)
        self._needs = tuple(needs)
        """The stores whose tables the graph reads read (made ready with this one)."""
        self._fact_names = NameCache()

    async def _ready(self) -> aiosqlite.Connection:
        for store in self._needs:
            await store._ready()
        return await super()._ready()

    async def _bootstrap(self, db: aiosqlite.Connection) -> None:
        async with transaction(db):
            for statement in SQLITE_ENTITY_TABLES:
                await db.execute(statement)
            await self._stamp_if_complete(db)

    async def _check_schema(self, db: aiosqlite.Connection, why: str) -> None:
        """A read-only file of an older version has no entity tables: it still opens (its
        other stores are read as usual; reading entities there fails)."""

    async def _figures(self, db: aiosqlite.Connection) -> dict[str, Any]:
        return {}
