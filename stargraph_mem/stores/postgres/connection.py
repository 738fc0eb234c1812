"""A psycopg 3 async connection seen through the shared ``Conn`` interface."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

__all__ = ["PgConn"]


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

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        cursor = await self.conn.execute(sql, params or None)
        return list(await cursor.fetchall())

    async def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = await self.fetch(sql, params)
        return rows[0][0] if rows else None
