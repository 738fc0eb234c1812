"""Entities over PostgreSQL: the shared entity repository on the database's pool.

The reads and writes are :class:`~stargraph_mem.stores.repositories.entities.Entities` (the
tables are created by the schema's migrations); definitions hold the schema's ``entities``
advisory lock, so two writers never both claim one alias.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stargraph_mem.stores.postgres.repository import PostgresRepository
from stargraph_mem.stores.repositories.entities import Entities, NameCache

if TYPE_CHECKING:
    from stargraph_mem.stores.postgres.owner import PgOwner

__all__ = ["PostgresEntityStore"]


class PostgresEntityStore(Entities, PostgresRepository):
    """Entities and graph reads of a :class:`PostgresDatabase`."""

    def __init__(self, database: PgOwner) -> None:
        super().__init__(database)
        self._fact_names = NameCache()
