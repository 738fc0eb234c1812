"""Statuses: what ``update_status`` costs, and what leaving challenged facts out of a
search costs against the same search before any fact was challenged.

Run: ``python benchmarks/bench_statuses.py`` (``--help`` for sizes). ``--facts`` facts are
spread over ``--users`` partitions (SQLite file in a temporary directory). Figures, all
from one run: p50/p95 of ``--queries`` text searches within one user (a) before any
challenge, (b) after one fact in ten was challenged (challenged ones left out, the default),
(c) the same with ``include_challenged=True``; p50/p95 of ``update_status`` to
``challenged`` and back to ``active`` (each one transaction: a delete delta applied, or a
status event).
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from stargraph_mem.stores import AddDelta, FactPayload, SQLiteFactStore

START = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = [f"w{i}" for i in range(500)]


def make_adds(count: int, users: int, rng: random.Random) -> list[AddDelta]:
    return [
        AddDelta(
            user=f"user{i % users}",
            agent="rag",
            source_episode_ids=[f"ep-{i}"],
            promotion_ts=START + timedelta(seconds=i),
            rule_id="promote",
            confidence=round(rng.random(), 3),
            fact=FactPayload(
                subject=f"user{i % users}",
                predicate=f"p{i // users}",
                object=" ".join(rng.choice(WORDS) for _ in range(3)),
            ),
        )
        for i in range(count)
    ]


def stats(ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=20)
    return f"p50 {statistics.median(ms):.3f} ms, p95 {q[18]:.3f} ms"


async def searches(
    store: SQLiteFactStore, queries: list[tuple[str, str]], **kwargs: Any
) -> list[float]:
    out = []
    for user, word in queries:
        t0 = time.perf_counter()
        await store.search(word, user=user, agent="rag", touch=False, **kwargs)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(7)
    adds = make_adds(args.facts, args.users, rng)
    queries = [(f"user{rng.randrange(args.users)}", rng.choice(WORDS)) for _ in range(args.queries)]
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteFactStore(path=Path(tmp) / "statuses.db")
        await store.bootstrap()
        for start in range(0, len(adds), 5_000):
            await store.apply_deltas(adds[start : start + 5_000])
        before = await searches(store, queries)
        flagged = [a.new_fact_id for a in adds[::10]]
        at = START + timedelta(days=1)
        challenge: list[float] = []
        for fid in flagged:
            t0 = time.perf_counter()
            await store.update_status(fid, "challenged", reason="benchmark", at=at)
            challenge.append((time.perf_counter() - t0) * 1000)
        left_out = await searches(store, queries)
        included = await searches(store, queries, include_challenged=True)
        clear: list[float] = []
        for fid in flagged[: args.clears]:
            t0 = time.perf_counter()
            await store.update_status(fid, "active", reason="benchmark", at=at + timedelta(hours=1))
            clear.append((time.perf_counter() - t0) * 1000)
        await store.close()
    base = statistics.median(before)
    print(f"{args.facts} facts over {args.users} partitions, {args.queries} searches each")
    print(f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}")
    print(f"search before challenges:        {stats(before)}")
    print(
        f"search, challenged left out:     {stats(left_out)} "
        f"({statistics.median(left_out) / base:.2f}x)"
    )
    print(
        f"search, include_challenged:      {stats(included)} "
        f"({statistics.median(included) / base:.2f}x)"
    )
    print(f"update_status -> challenged ({len(challenge)}): {stats(challenge)}")
    print(f"update_status -> active ({len(clear)}):       {stats(clear)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--facts", type=int, default=20_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--clears", type=int, default=500)
    asyncio.run(main(parser.parse_args()))
