"""Throughput of the fact store: ``apply_deltas`` for adds, then for updates.

Run: ``python benchmarks/bench_fact_store.py`` (``--help`` for sizes); ``--postgres URL``
measures the PostgreSQL store instead (a fresh schema of that database, dropped after).
Deltas are built (and validated) before timing starts, so the figures measure the store:
validation pass, conflict resolution, provenance, ``executemany`` writes and the one commit.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from stargraph_mem.stores import AddDelta, FactPayload, SQLiteFactStore, UpdateDelta
from stargraph_mem.stores.postgres import PostgresDatabase, PostgresFactStore

USERS = 20
AGENTS = 3
START = datetime(2026, 1, 1, tzinfo=UTC)


def make_adds(count: int) -> list[AddDelta]:
    """Deterministic add deltas spread over USERS x AGENTS partitions."""
    return [
        AddDelta(
            user=f"user{i % USERS}",
            agent=f"agent{i % AGENTS}",
            source_episode_ids=[f"ep-{i}"],
            promotion_ts=START + timedelta(seconds=i),
            rule_id="promote",
            confidence=0.9,
            reason=f"episode ep-{i} states it",
            bindings={"e": f"ep-{i}", "n": i},
            fact=FactPayload(subject=f"s{i}", predicate="likes", object=f"o{i}"),
        )
        for i in range(count)
    ]


def make_updates(adds: list[AddDelta]) -> list[UpdateDelta]:
    """One update per add, replacing the fact that add created."""
    later = timedelta(days=1)
    return [
        UpdateDelta(
            **add.model_dump(exclude={"kind", "promotion_ts", "fact"}),
            promotion_ts=add.promotion_ts + later,
            replaces=[add.new_fact_id],
            fact=add.fact.model_copy(update={"object": add.fact.triple[2] + "-v2"}),
        )
        for add in adds
    ]


async def run(size: int, batch: int, postgres: str | None = None) -> None:
    """Apply ``size`` adds then ``size`` updates in batches; print deltas per second."""
    adds = make_adds(size)
    updates = make_updates(adds)
    async with open_store(postgres) as store:
        for name, deltas in (("add", adds), ("update", updates)):
            start = time.perf_counter()
            for offset in range(0, size, batch):
                await store.apply_deltas(deltas[offset : offset + batch], pack_hash="bench")
            seconds = time.perf_counter() - start
            print(f"{name:<7} {size:>9,} batch {batch:>9,}  {size / seconds:>10,.0f} deltas/s")


@asynccontextmanager
async def open_store(postgres: str | None) -> AsyncIterator[SQLiteFactStore | PostgresFactStore]:
    """A fresh SQLite file, or a fresh schema of the ``postgres`` database (dropped after)."""
    if postgres is None:
        with tempfile.TemporaryDirectory() as tmp:
            async with SQLiteFactStore(Path(tmp) / "facts.db") as store:
                yield store
        return
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        async with PostgresDatabase(f"{postgres}?schema={schema}") as db:
            yield db.facts
    finally:
        async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    """Parse sizes and run."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--postgres", metavar="URL", help="measure PostgreSQL at this URL")
    args = parser.parse_args()
    print(f"# python {platform.python_version()}, {platform.machine()}")
    for size in args.sizes:
        asyncio.run(run(size, min(args.batch, size), args.postgres))


if __name__ == "__main__":
    main()
