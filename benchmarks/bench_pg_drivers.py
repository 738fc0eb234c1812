"""psycopg 3 (pool) against asyncpg on the PostgreSQL fact store's apply-path statement mix.

Four variants over the same rows: each driver with ``executemany`` for every write, and
each writing as the store does: the new rows (facts, lineage, search text, audit) with
``COPY`` (psycopg through the store's own connection wrapper; asyncpg's
``copy_records_to_table``) and the closes as one ``UPDATE`` over column arrays.

Run: ``python benchmarks/bench_pg_drivers.py [--url postgresql://…] [--deltas N --batch B]``
(needs the ``bench`` extra for asyncpg). Each variant gets a fresh schema (created by the
store's own migrations, dropped afterwards) and the same rows, built before timing; the
variants alternate over ``--rounds`` and the best round of each is printed, with its ratio
to the first.

One pass (``--batch`` deltas) is one transaction: the reads a pass makes (watermarks,
version, last rowid and seq, stored ids, fact states), the inserts of facts, lineage,
search text and audit rows, closes (the update passes) and a watermark upsert.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import psycopg
from psycopg_pool import AsyncConnectionPool

from stargraph_mem.stores.postgres import PostgresDatabase, PostgresFactStore
from stargraph_mem.stores.postgres.connection import PgConn
from stargraph_mem.stores.scope import partition_key
from stargraph_mem.stores.sql_conn import Insert, Many

PARTITIONS = 60
Rows = list[tuple[Any, ...]]
Pass = tuple[str, list[str], Rows, Rows, Rows, Rows, Rows, Rows]
"""partition key, ids read back, then fact, lineage, index, audit, close, watermark rows."""


def make_passes(deltas: int, batch: int, *, update: bool) -> list[Pass]:
    """The rows of ``deltas`` adds (or updates of them) cut into passes of ``batch``."""
    passes: list[Pass] = []
    offset = deltas if update else 0
    for start in range(0, deltas, batch):
        index = range(start, min(start + batch, deltas))
        key = partition_key(f"user{start % PARTITIONS}", "agent")
        ids = [f"f{'u' if update else 'a'}{i:031d}" for i in index]
        facts = [
            (
                offset + i + 1,
                ids[n],
                f"user{start % PARTITIONS}",
                "agent",
                key,
                f"s{i}",
                "likes",
                f"o{i}",
                b"{}",
                0.9,
                1_000_000 + i,
                2_000_000,
                "promote",
                "d" + ids[n][1:],
                None,
                None,
                None,
            )
            for n, i in enumerate(index)
        ]
        lineage = [
            (
                offset + i + 1,
                ids[n],
                "promote",
                "bench",
                "d" + ids[n][1:],
                f'["ep-{i}"]',
                1_000_000 + i,
                0.9,
                f"episode ep-{i} states it",
                f'{{"e": "ep-{i}", "n": {i}}}',
                "[]",
                offset + i + 1,
            )
            for n, i in enumerate(index)
        ]
        text = [(offset + i + 1, f"s{i} likes o{i} {{}}") for i in index]
        audit = [
            (
                offset + i + 1,
                "d" + ids[n][1:],
                "update" if update else "add",
                "promote",
                "bench",
                f"user{start % PARTITIONS}",
                "agent",
                key,
                2_000_000,
                f'{{"kind": "add", "n": {i}}}',
            )
            for n, i in enumerate(index)
        ]
        closes = (
            [(3_000_000, ids[n], "d" + ids[n][1:], f"fa{i:031d}") for n, i in enumerate(index)]
            if update
            else []
        )
        marks = [("bench", "promote", key, start + batch, 2_000_000)]
        passes.append((key, ids, facts, lineage, text, audit, closes, marks))
    return passes


def dollar(sql: str) -> str:
    """``%s`` placeholders as asyncpg's ``$1, $2, …``."""
    counter = iter(range(1, 1_000))
    return re.sub("%s", lambda _: f"${next(counter)}", sql)


FACTS = PostgresFactStore.sql
READS = (FACTS.marks, FACTS.version, FACTS.last_ids)


def read_params(key: str) -> Sequence[Sequence[Any]]:
    return (("bench", key), (key,), ())


def writes(one: Pass) -> list[tuple[Insert | Many | str, Rows]]:
    """The pass's writes in the order the store makes them."""
    _, _, facts, lineage, text, audit, closes, marks = one
    return [
        (FACTS.insert_fact, facts),
        (FACTS.insert_lineage, lineage),
        (FACTS.index_fact, text),
        (FACTS.close, closes),
        (FACTS.insert_audit, audit),
        (FACTS.upsert_watermark, marks),
    ]


async def psycopg_pass(pool: AsyncConnectionPool[Any], one: Pass, *, copy: bool) -> None:
    """One pass on a pooled psycopg connection, through the store's own ``PgConn``; the
    new rows by ``COPY`` (as the store writes them) or by ``executemany``."""
    key, ids, *_, closes, _ = one
    async with pool.connection() as conn, conn.transaction():
        db = PgConn(conn)
        for sql, params in zip(READS, read_params(key), strict=True):
            await db.fetch(sql, params)
        await db.fetch(FACTS.stored_facts_in, (ids,))
        if closes:
            await db.fetch(FACTS.fact_states_in, ([close[3] for close in closes],))
        for statement, rows in writes(one):
            if not rows:
                continue
            if isinstance(statement, str):
                await db.executemany(statement, rows)
            elif not copy:
                await db.executemany(statement.sql, rows)
            elif isinstance(statement, Insert):
                await db.insert_many(statement, rows)
            else:
                await db.run_many(statement, rows)


async def asyncpg_pass(pool: asyncpg.Pool, one: Pass, *, copy: bool) -> None:
    """The same pass on asyncpg: ``executemany``, or ``copy_records_to_table``."""
    key, ids, *_, closes, _ = one
    async with pool.acquire() as conn, conn.transaction():
        for sql, params in zip(READS, read_params(key), strict=True):
            await conn.fetch(dollar(sql), *params)
        await conn.fetch(dollar(FACTS.stored_facts_in), ids)
        if closes:
            await conn.fetch(dollar(FACTS.fact_states_in), [close[3] for close in closes])
        for statement, rows in writes(one):
            if not rows:
                continue
            if isinstance(statement, str):
                await conn.executemany(dollar(statement), rows)
            elif not copy:
                await conn.executemany(dollar(statement.sql), rows)
            elif isinstance(statement, Insert):
                columns = list(statement.columns)
                await conn.copy_records_to_table(statement.table, records=rows, columns=columns)
            else:
                arrays = [list(column) for column in zip(*rows, strict=True)]
                await conn.execute(dollar(statement.arrays), *arrays)


async def fresh_schema(url: str) -> str:
    """A new schema with the stores' tables, made by the stores' own migrations."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    async with PostgresDatabase(f"{url}?schema={name}"):
        pass
    return name


async def drop(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def timed(run: Callable[[Pass], Awaitable[None]], passes: list[list[Pass]]) -> float:
    start = time.perf_counter()
    for group in passes:
        for one in group:
            await run(one)
    return time.perf_counter() - start


VARIANTS = (
    "psycopg executemany",
    "psycopg COPY (the store)",
    "asyncpg executemany",
    "asyncpg COPY",
)


async def _psycopg(url: str, schema: str, passes: list[list[Pass]], copy: bool) -> float:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url,
        min_size=1,
        max_size=2,
        open=False,
        kwargs={"autocommit": True, "options": f"-c search_path={schema}"},
    )
    await pool.open(wait=True)
    try:
        return await timed(lambda p: psycopg_pass(pool, p, copy=copy), passes)
    finally:
        await pool.close()


async def _asyncpg(url: str, schema: str, passes: list[list[Pass]], copy: bool) -> float:
    pool = await asyncpg.create_pool(
        url, min_size=1, max_size=2, server_settings={"search_path": schema}
    )
    try:
        return await timed(lambda p: asyncpg_pass(pool, p, copy=copy), passes)
    finally:
        await pool.close()


async def one_round(url: str, passes: list[list[Pass]], deltas: int) -> dict[str, float]:
    """Every variant over the same rows, each on a fresh schema: deltas per second."""
    runs = (
        (_psycopg, False),
        (_psycopg, True),
        (_asyncpg, False),
        (_asyncpg, True),
    )
    rates: dict[str, float] = {}
    for name, (driver, copy) in zip(VARIANTS, runs, strict=True):
        schema = await fresh_schema(url)
        try:
            rates[name] = 2 * deltas / await driver(url, schema, passes, copy)
        finally:
            await drop(url, schema)
    return rates


async def run(url: str, deltas: int, batch: int, rounds: int) -> None:
    passes = [make_passes(deltas, batch, update=False), make_passes(deltas, batch, update=True)]
    best: dict[str, float] = {}
    for number in range(rounds):
        rates = await one_round(url, passes, deltas)
        print(f"round {number + 1}: " + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items()))
        for name, rate in rates.items():
            best[name] = max(best.get(name, 0.0), rate)
    base = best[VARIANTS[0]]
    for name, rate in best.items():
        print(
            f"{name:<26} {deltas:>7,} adds + updates, batch {batch:>6,}  "
            f"{rate:>8,.0f} deltas/s  ×{rate / base:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        f"# python {platform.python_version()}, psycopg {psycopg.__version__}, "
        f"asyncpg {asyncpg.__version__}"
    )
    asyncio.run(run(args.url, args.deltas, args.batch, args.rounds))


if __name__ == "__main__":
    main()
