"""Throughput of the episodic SQLite store: put_many, recent() and since().

Run: ``python benchmarks/bench_memory_store.py`` (``--help`` for sizes and batch sizes).
Each size gets a fresh temporary database; episodes are built before timing starts, so
the figures measure the store, not pydantic construction of the inputs.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stargraph_mem.stores import Episode, Partition, SQLiteMemoryStore

USERS = 20
SESSIONS = 10
AGENTS = 3
START = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Result:
    """One row of the results table."""

    benchmark: str
    size: int
    detail: str
    value: float
    unit: str


def make_episodes(count: int) -> list[Episode]:
    """Deterministic episodes spread over USERS x SESSIONS x AGENTS scopes."""
    return [
        Episode(
            id=f"ep-{i}",
            content=f"user said thing number {i}",
            timestamp=START + timedelta(seconds=i),
            user=f"user{i % USERS}",
            session=f"session{(i // USERS) % SESSIONS}",
            agent=f"agent{i % AGENTS}",
            metadata={"subject": f"s{i % 97}", "predicate": "likes", "object": f"o{i}"},
        )
        for i in range(count)
    ]


async def timed(action: Callable[[], Awaitable[int]]) -> tuple[int, float]:
    """Run ``action`` once; return what it counted and the seconds it took."""
    start = time.perf_counter()
    count = await action()
    return count, time.perf_counter() - start


async def bench_put_many(path: Path, episodes: list[Episode], batch: int) -> Result:
    """Insert every episode in batches of ``batch`` (one transaction per batch)."""
    async with SQLiteMemoryStore(path) as store:

        async def run() -> int:
            written = 0
            for start in range(0, len(episodes), batch):
                written += await store.put_many(episodes[start : start + batch])
            return written

        written, seconds = await timed(run)
    assert written == len(episodes), (written, len(episodes))
    return Result("put_many", len(episodes), f"batch {batch}", written / seconds, "episodes/s")


async def bench_recent(store: SQLiteMemoryStore, size: int, calls: int) -> list[Result]:
    """recent(limit=20) at session level and at the widest (user) level: calls per second."""
    results = []
    shapes: dict[str, Callable[[int], Awaitable[list[Episode]]]] = {
        "session": lambda i: store.recent(
            f"user{i % USERS}", f"session{i % SESSIONS}", f"agent{i % AGENTS}", limit=20
        ),
        "user+agent": lambda i: store.recent(
            f"user{i % USERS}", agent=f"agent{i % AGENTS}", limit=20
        ),
        "user": lambda i: store.recent(f"user{i % USERS}", limit=20),
    }
    for name, call in shapes.items():

        async def run(call: Callable[[int], Awaitable[list[Episode]]] = call) -> int:
            for i in range(calls):
                await call(i)
            return calls

        done, seconds = await timed(run)
        results.append(Result("recent", size, f"{name}, limit 20", done / seconds, "calls/s"))
    return results


async def bench_since(store: SQLiteMemoryStore, size: int) -> Result:
    """Read every partition from seq 0 in pages of 10,000: rows per second."""
    partitions = await store.partitions()

    async def run() -> int:
        rows = 0
        for partition in partitions:
            rows += await read_partition(store, partition)
        return rows

    rows, seconds = await timed(run)
    assert rows == size, (rows, size)
    return Result("since", size, "pages of 10000", rows / seconds, "rows/s")


async def read_partition(store: SQLiteMemoryStore, partition: Partition) -> int:
    """Page through one partition the way the consolidation runtime does."""
    after, rows = 0, 0
    while page := await store.since(partition, after, limit=10_000):
        rows += len(page)
        after = page[-1].seq
    return rows


async def bench_size(size: int, batches: list[int], calls: int) -> list[Result]:
    """Every benchmark at one database size, each put_many batch size in a fresh file."""
    episodes = make_episodes(size)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for batch in batches:
            results.append(await bench_put_many(Path(tmp) / f"b{batch}.db", episodes, batch))
        async with SQLiteMemoryStore(Path(tmp) / f"b{batches[-1]}.db") as store:
            results.extend(await bench_recent(store, size, calls))
            results.append(await bench_since(store, size))
    return results


def print_table(results: list[Result]) -> None:
    """Aligned plain-text table, ready to copy into benchmarks/README.md."""
    print(f"# python {platform.python_version()}, {platform.machine()}")
    print(f"{'benchmark':<10} {'size':>8}  {'detail':<22} {'figure':>22}")
    for r in results:
        figure = f"{r.value:,.0f} {r.unit}"
        print(f"{r.benchmark:<10} {r.size:>8}  {r.detail:<22} {figure:>22}")


def main() -> None:
    """Parse sizes, run every benchmark, print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--batches", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--calls", type=int, default=2_000, help="recent() calls per shape")
    args = parser.parse_args()
    results: list[Result] = []
    for size in args.sizes:
        results.extend(asyncio.run(bench_size(size, args.batches, args.calls)))
    print_table(results)


if __name__ == "__main__":
    main()
