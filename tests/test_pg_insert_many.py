"""PostgreSQL's ``insert_many``: a few rows go in as one ``INSERT``, many by ``COPY``, and
both store the same values (text, numbers, bytes, JSON text, NULLs) in column order."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from backends import PG_URL

from stargraph_mem.stores.postgres.connection import COPY_MIN_ROWS, PgConn
from stargraph_mem.stores.sql_conn import Insert

COLUMNS = ("name", "n", "ratio", "body", "doc", "maybe")
INSERT = Insert("rows_in", COLUMNS, "")


@pytest.fixture
async def conn() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(PG_URL) as connection:
        await connection.execute(
            "CREATE TEMP TABLE rows_in (name text, n bigint, ratio double precision, "
            "body bytea, doc jsonb, maybe text)"
        )
        yield connection


def rows(count: int) -> list[tuple[Any, ...]]:
    return [
        (f"r{i} 'quoted' %s", 2**40 + i, i / 4, bytes([i % 256, 0]), f'{{"i": {i}}}', None)
        if i % 2
        else (f"r{i}", i, 0.5, b"", "[]", "x")
        for i in range(count)
    ]


async def stored(connection: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
    """The table's rows by ``n`` (``doc`` as the JSON value PostgreSQL parsed)."""
    cursor = await connection.execute(f"SELECT {', '.join(COLUMNS)} FROM rows_in ORDER BY n")
    return [tuple(row) for row in await cursor.fetchall()]


@pytest.mark.parametrize("count", [0, 1, 3, COPY_MIN_ROWS - 1, COPY_MIN_ROWS, 40])
async def test_rows_arrive_whole_either_way(conn: psycopg.AsyncConnection[Any], count: int) -> None:
    written = rows(count)
    await PgConn(conn).insert_many(INSERT, written)
    expected = sorted(
        (
            (name, n, ratio, body, json.loads(doc), maybe)
            for name, n, ratio, body, doc, maybe in written
        ),
        key=lambda row: row[1],
    )
    assert await stored(conn) == expected
