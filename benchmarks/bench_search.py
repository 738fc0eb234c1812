"""Fact search: latency of ``SQLiteFactStore.search`` over many current facts.

Run: ``python benchmarks/bench_search.py`` (``--help`` for sizes). Facts are spread over
USERS partitions with objects drawn from a small vocabulary, so common and rare words
both occur; each figure is the median (p50) and p95 of ``--queries`` searches, with and
without recording access, for a text query within one user and for a filter-only search.
The cost search adds to the apply path is measured by running ``bench_fact_store.py``
at this commit and at the commit before the index, side by side.
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

from stargraph_mem.stores import AddDelta, FactPayload, SQLiteFactStore

USERS = 1_000
START = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = [f"w{i}" for i in range(2_000)]


def make_adds(count: int, rng: random.Random) -> list[AddDelta]:
    """``count`` adds: three random words per object, one predicate of ten."""
    return [
        AddDelta(
            user=f"user{i % USERS}",
            agent="rag",
            source_episode_ids=[f"ep-{i}"],
            promotion_ts=START + timedelta(seconds=i),
            rule_id="promote",
            confidence=round(rng.random(), 3),
            fact=FactPayload(
                subject=f"user{i % USERS}",
                predicate=f"p{i % 10}",
                object=" ".join(rng.choice(WORDS) for _ in range(3)),
            ),
        )
        for i in range(count)
    ]


async def timed(calls: list[tuple[str, dict[str, object]]], store: SQLiteFactStore) -> list[float]:
    """Milliseconds per search call."""
    out = []
    for query, kwargs in calls:
        t0 = time.perf_counter()
        await store.search(query, **kwargs)  # type: ignore[arg-type]
        out.append((time.perf_counter() - t0) * 1000)
    return out


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


async def run(size: int, queries: int) -> None:
    rng = random.Random(7)
    adds = make_adds(size, rng)
    with tempfile.TemporaryDirectory() as tmp:
        async with SQLiteFactStore(Path(tmp) / "facts.db") as store:
            for start in range(0, size, 10_000):
                await store.apply_deltas(adds[start : start + 10_000])
            cases: dict[str, list[tuple[str, dict[str, object]]]] = {
                "text, one user, touch": [
                    (
                        f"{rng.choice(WORDS)} {rng.choice(WORDS)}",
                        {"user": f"user{rng.randrange(USERS)}"},
                    )
                    for _ in range(queries)
                ],
                "text, one user, no touch": [
                    (
                        f"{rng.choice(WORDS)} {rng.choice(WORDS)}",
                        {"user": f"user{rng.randrange(USERS)}", "touch": False},
                    )
                    for _ in range(queries)
                ],
                "text, all users, no touch": [
                    (rng.choice(WORDS), {"touch": False}) for _ in range(queries)
                ],
                "filters only, one user, no touch": [
                    ("", {"user": f"user{rng.randrange(USERS)}", "agent": "rag", "touch": False})
                    for _ in range(queries)
                ],
            }
            for name, calls in cases.items():
                ms = await timed(calls, store)
                print(
                    f"{name:34} {size:>10,} facts  p50 {p(ms, 50):7.2f} ms  p95 {p(ms, 95):7.2f} ms"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    print(f"# python {platform.python_version()}, SQLite {sqlite3.sqlite_version}")
    for size in args.sizes:
        asyncio.run(run(size, args.queries))


if __name__ == "__main__":
    main()
