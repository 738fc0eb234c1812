"""Vectors and the episodes' full-text index over PostgreSQL: the shared repository on the
database's pool.

The reads and writes are
:class:`~stargraph_mem.stores.repositories.vectors.SQLVectorRepository` (the tables are
created by the schema's migration 7); vector and index writes hold the schema's
``vectors`` advisory lock, so their seqs commit in order.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from stargraph_mem.stores.postgres.repository import PostgresRepository
from stargraph_mem.stores.repositories.vectors import VECTORS_LOCK, SQLVectorRepository
from stargraph_mem.stores.sql_conn import Conn

__all__ = ["PostgresVectorStore"]


class PostgresVectorStore(SQLVectorRepository, PostgresRepository):
    """Vectors and the episodes' full-text index of a :class:`PostgresDatabase`."""

    def _vectors_reading(self) -> AbstractAsyncContextManager[Conn]:
        return self.database.connection()

    def _vectors_writing(self) -> AbstractAsyncContextManager[Conn]:
        return self.database.transaction(VECTORS_LOCK)
