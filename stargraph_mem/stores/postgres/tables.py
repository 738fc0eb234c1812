"""Whole-table reads and writes of a PostgreSQL memory, for copies between databases.

The copy (:mod:`~stargraph_mem.stores.copy`) names the tables and columns; this module
reads them in key order and writes them inside the owner's loading transaction. Episode
seqs are copied as they are (``OVERRIDING SYSTEM VALUE``) and the identity then moved past
them; the search index, derived data, is rebuilt from the copied facts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from stargraph_mem.stores.postgres.connection import PgConn
from stargraph_mem.stores.postgres.dialect import POSTGRES
from stargraph_mem.stores.repositories.search import body_text

if TYPE_CHECKING:
    from stargraph_mem.stores.postgres.owner import PgOwner
    from stargraph_mem.stores.tables import Table

__all__ = ["PostgresTables"]

_RESTART_SEQ: Final = (
    "SELECT setval(pg_get_serial_sequence('episodes', 'seq'), "
    "coalesce((SELECT max(seq) FROM episodes), 0) + 1, false)"
)
_FACT_TEXT: Final = "SELECT rowid, subject, predicate, object, payload FROM facts ORDER BY rowid"


def _columns(table: Table) -> str:
    return ", ".join(f'"{column}"' for column in table.columns)


class PostgresTables:
    """A copy's reads (``db`` None: on a pooled connection) or writes (``db``: the loading
    transaction's connection) of whole tables."""

    def __init__(self, database: PgOwner, db: PgConn | None = None) -> None:
        self.database = database
        self.db = db

    async def rows(self, table: Table, chunk: int) -> AsyncIterator[list[tuple[Any, ...]]]:
        """The table's rows in key order, ``chunk`` at a time."""
        order = ", ".join(f'"{column}"' for column in table.order)
        sql = f'SELECT {_columns(table)} FROM "{table.name}" ORDER BY {order}'
        if self.db is not None:
            async for batch in _chunks(self.db, sql, chunk):
                yield batch
            return
        async with self.database.connection() as db:
            async for batch in _chunks(db, sql, chunk):
                yield batch

    async def count(self, table: str) -> int:
        assert self.db is not None
        return int(await self.db.scalar(f'SELECT count(*) FROM "{table}"') or 0)

    async def insert(self, table: Table, rows: Sequence[tuple[Any, ...]]) -> None:
        assert self.db is not None
        marks = ", ".join("%s" for _ in table.columns)
        sql = (
            f'INSERT INTO "{table.name}" ({_columns(table)}) OVERRIDING SYSTEM VALUE '
            f"VALUES ({marks})"
        )
        await self.db.executemany(sql, rows)

    async def finish(self) -> None:
        """Index the copied facts for search; move the episode seq past the copied ones."""
        assert self.db is not None
        facts = await self.db.fetch(_FACT_TEXT)
        rows = [
            (rowid, POSTGRES.index_text(body_text(subject, predicate, obj, payload)))
            for rowid, subject, predicate, obj, payload in facts
        ]
        await self.db.execute("DELETE FROM fact_text")
        if rows:
            await self.db.insert_many(POSTGRES.index_fact(), rows)
        await self.db.execute(_RESTART_SEQ)


async def _chunks(db: PgConn, sql: str, chunk: int) -> AsyncIterator[list[tuple[Any, ...]]]:
    async with db.conn.cursor() as cursor:
        await cursor.execute(sql)
        while batch := await cursor.fetchmany(chunk):
            yield [tuple(row) for row in batch]
