"""Statuses: what ``update_status`` costs, and what leaving challenged facts out of a
search costs against the same search before any fact was challenged.

Run: ``python benchmarks/bench_statuses.py`` (``--help`` for sizes). ``--facts`` facts are
made as ``bench_search.py`` makes them (1,000 partitions; SQLite file in a temporary
directory). Figures, all
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
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench_search import USERS, WORDS, make_adds

from stargraph_mem.stores import SQLiteFactStore


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
    adds = make_adds(args.facts, rng)
    queries = [(f"user{rng.randrange(USERS)}", rng.choice(WORDS)) for _ in range(args.queries)]
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteFactStore(path=Path(tmp) / "statuses.db")
        await store.bootstrap()
        for start in range(0, len(adds), 5_000):
            await store.apply_deltas(adds[start : start + 5_000])
        before = await searches(store, queries)
        flagged = [a.new_fact_id for a in adds[::10]]
        at = adds[-1].promotion_ts + timedelta(days=1)
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
    print(f"{args.facts} facts over {USERS} partitions, {args.queries} searches each")
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
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--clears", type=int, default=500)
    asyncio.run(main(parser.parse_args()))
