"""Entities and graph reads: latency of ``database.entities`` reads in one large partition.

Run: ``python benchmarks/bench_entities.py`` (``--help`` for sizes; ``--pg URL`` measures a
PostgreSQL database too, in a fresh schema dropped afterwards). One partition holds
``--episodes`` episodes in sessions of ``--session`` episodes, ``--facts`` current facts
whose subjects and objects are drawn from ``--names`` names (each fact sourced from one
episode), and ``--declared`` declared entities with two aliases each. Each figure is the
median (p50) and p95 of ``--calls`` calls; ``names (cold)`` is the first read of the
partition's fact names (later reads add only the facts made since).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from stargraph_mem.stores import AddDelta, FactPayload, Partition
from stargraph_mem.stores.database import open_database
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.protocols import Database

START = datetime(2026, 1, 1, tzinfo=UTC)
P = Partition("alice", "rag")


def names(count: int) -> list[str]:
    """``count`` distinct names of one or two words."""
    return [f"Name{i}" if i % 2 else f"Given{i} Family{i}" for i in range(count)]


async def fill(db: Database, args: argparse.Namespace, rng: random.Random) -> list[str]:
    episodes = [
        Episode(
            id=f"ep-{i}",
            content=f"episode {i}",
            timestamp=START + timedelta(seconds=i),
            user=P.user,
            session=f"s{i // args.session}",
            agent=P.agent,
        )
        for i in range(args.episodes)
    ]
    await db.memory.put_many(episodes)
    pool = names(args.names)
    for start in range(0, args.facts, 1000):
        adds = [
            AddDelta(
                user=P.user,
                agent=P.agent,
                source_episode_ids=[f"ep-{rng.randrange(args.episodes)}"],
                promotion_ts=START + timedelta(seconds=i),
                rule_id="bench",
                confidence=round(rng.random(), 3),
                fact=FactPayload(
                    subject=rng.choice(pool), predicate=f"p{i}", object=rng.choice(pool)
                ),
            )
            for i in range(start, min(start + 1000, args.facts))
        ]
        await db.facts.apply_deltas(adds)
    for i in range(args.declared):
        await db.entities.define(P, f"Entity {i}", aliases=[f"E{i}", f"Ent {i} alias"])
    return pool


async def timed(calls: int, make: Callable[[int], Awaitable[Any]]) -> tuple[float, float]:
    out = []
    for i in range(calls):
        t0 = time.perf_counter()
        await make(i)
        out.append((time.perf_counter() - t0) * 1000)
    out.sort()
    return statistics.median(out), out[int(len(out) * 0.95) - 1]


async def run(location: str, args: argparse.Namespace) -> list[tuple[str, float, float]]:
    rng = random.Random(7)
    rows: list[tuple[str, float, float]] = []
    async with open_database(location) as db:
        pool = await fill(db, args, rng)
        repo = db.entities
        t0 = time.perf_counter()
        await repo.resolve(P, pool[0])
        cold = (time.perf_counter() - t0) * 1000
        rows.append(("names (cold), then resolve", cold, cold))
        fact_ids = await repo.facts_of_entities(P, pool[:5], limit=50)

        def query(i: int) -> str:
            return (
                f"what did {pool[i % len(pool)]} tell entity {i % args.declared} about "
                f"e{i} and {pool[(i * 7) % len(pool)]} last week in the big city?"
            )

        cases: list[tuple[str, Callable[[int], Awaitable[Any]]]] = [
            ("resolve (declared alias)", lambda i: repo.resolve(P, f"e{i % args.declared}")),
            ("resolve (fact name)", lambda i: repo.resolve(P, pool[i % len(pool)])),
            ("mentioned (16-word query)", lambda i: repo.mentioned(P, query(i))),
            (
                "temporal_neighbours (5 seeds, depth 2)",
                lambda i: repo.temporal_neighbours(
                    P, [f"ep-{(i * 97 + k * 13) % args.episodes}" for k in range(5)], depth=2
                ),
            ),
            (
                "facts_of_entities (3 names, limit 50)",
                lambda i: repo.facts_of_entities(P, pool[i % 50 : i % 50 + 3], limit=50),
            ),
            ("profile (limit 50)", lambda i: repo.profile(P, pool[i % len(pool)], limit=50)),
            (
                "lineage_neighbours (5 facts)",
                lambda i: repo.lineage_neighbours(fact_ids[i % 10 : i % 10 + 5]),
            ),
        ]
        for label, make in cases:
            p50, p95 = await timed(args.calls, make)
            rows.append((label, p50, p95))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20_000)
    parser.add_argument("--session", type=int, default=50, help="episodes per session")
    parser.add_argument("--facts", type=int, default=10_000)
    parser.add_argument("--names", type=int, default=2_000)
    parser.add_argument("--declared", type=int, default=500)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--pg", default="", help="also measure this postgresql:// database")
    args = parser.parse_args()
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}; "
        f"{args.episodes} episodes, {args.facts} facts, {args.names} names, "
        f"{args.declared} declared entities, {args.calls} calls"
    )
    targets: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        targets.append(("sqlite", str(Path(tmp) / "bench.db")))
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        if args.pg:
            targets.append(("postgresql", f"{args.pg}?schema={schema}"))
        try:
            for backend, location in targets:
                for label, p50, p95 in asyncio.run(run(location, args)):
                    print(f"{backend:10} {label:42} p50 {p50:8.2f} ms  p95 {p95:8.2f} ms")
        finally:
            if args.pg:
                asyncio.run(_drop(args.pg, schema))


async def _drop(url: str, schema: str) -> None:
    import psycopg

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


if __name__ == "__main__":
    main()
