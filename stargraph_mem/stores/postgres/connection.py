"""A psycopg 3 async connection seen through the shared ``Conn`` interface."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from psycopg import AsyncConnection

from stargraph_mem.stores.sql_conn import Insert, Many

__all__ = ["COPY_MIN_ROWS", "PgConn"]

COPY_MIN_ROWS: Final = 16
"""Fewer rows than this go in as one multi-row ``INSERT`` rather than a ``COPY``.

A ``COPY`` costs more round trips to the server than a statement (it is started, fed and
ended), so a record's pass, which writes one fact, one lineage row and one audit row,
paid for three of them: measured on one connection, a one-row ``COPY`` took about twice
as long as a one-row ``INSERT``; from a few dozen rows on, ``COPY`` is the faster."""


class PgConn:
    """Runs statements on one pooled connection (in its transaction, if one is open)."""

    __slots__ = ("conn",)

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self.conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        cursor = await self.conn.execute(sql, params or None)
        return max(cursor.rowcount, 0)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        async with self.conn.cursor() as cursor:
            await cursor.executemany(sql, rows)
            return max(cursor.rowcount, 0)

    async def insert_many(self, insert: Insert, rows: Sequence[Sequence[Any]]) -> None:
        """``COPY`` the rows in (several times faster than one ``INSERT`` per row); a few
        rows go in as one ``INSERT`` of them all (see :data:`COPY_MIN_ROWS`)."""
        if not rows:
            return
        names = ", ".join(f'"{column}"' for column in insert.columns)
        if len(rows) < COPY_MIN_ROWS:
            one = "(" + ", ".join(["%s"] * len(insert.columns)) + ")"
            values = ", ".join([one] * len(rows))
            await self.conn.execute(
                f"INSERT INTO {insert.table} ({names}) VALUES {values}",
                [value for row in rows for value in row],
            )
            return
        statement = f"COPY {insert.table} ({names}) FROM STDIN"
        async with self.conn.cursor() as cursor, cursor.copy(statement) as copy:
            for row in rows:
                await copy.write_row(row)

    async def run_many(self, statement: Many, rows: Sequence[Sequence[Any]]) -> None:
        """One statement over column arrays when ``statement`` has one, else one per row."""
        if not statement.arrays:
            await self.executemany(statement.sql, rows)
            return
        columns = [list(column) for column in zip(*rows, strict=True)]
        await self.conn.execute(statement.arrays, columns)

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        cursor = await self.conn.execute(sql, params or None)
        return list(await cursor.fetchall())

    async def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = await self.fetch(sql, params)
        return rows[0][0] if rows else None
