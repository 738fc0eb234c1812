"""Vectors and the episodes' full-text index: catch-up throughput and ``nearest`` latency
over one partition, on SQLite and PostgreSQL, and what the tables cost a streaming
``record`` (none of their work is on its path).

Part 1 (``--backends``): one partition holding ``--episodes`` episodes and ``--facts``
current facts; one ``catch_up`` indexes every episode for full text and embeds every
episode and fact (a trivial fast embedder: a seeded random unit vector per text, so the
figure is the store's work, not a model's); then ``nearest`` is called ``--calls`` times
per shape: the first call loads the partition's cache, the p50 is over the later ones
(wall clock, and the process's CPU time, which a busy machine inflates less).
A catch-up with nothing pending and an ``episode_text_hits`` are timed too.

Part 2 (``--record-trees OLD NEW``): ``record`` p50 of ``bench_streaming.py``'s workload
(1,000 episodes of history, an ``every: 1`` pack) run by each source tree in turn, in
child processes (``PYTHONPATH`` = the tree), ``--pairs`` times, so both see the same
machine.

    python benchmarks/bench_vectors.py --backends sqlite postgresql
    python benchmarks/bench_vectors.py --backends --record-trees /tmp/base . --pairs 3
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np

from stargraph_mem.embedding import Matrix
from stargraph_mem.model.deltas import AddDelta
from stargraph_mem.stores.database import open_database
from stargraph_mem.stores.models import Episode, FactPayload
from stargraph_mem.stores.protocols import Database
from stargraph_mem.stores.scope import Partition

PARTITION = Partition("bench-user", "bench-agent")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
PG_URL = os.environ.get("STARGRAPH_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
WORDS = ("tea coffee walk park book film music code garden city train rain sun cat dog").split()  # noqa: SIM905


class RandomEmbedder:
    """A seeded random unit vector per text (fast and deterministic; no meaning)."""

    name = "bench-random"
    version = "1"

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension

    def embed(self, texts: Sequence[str]) -> Matrix:
        seeds = [int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest()) for t in texts]
        rows = np.stack(
            [np.random.default_rng(s).standard_normal(self.dimension) for s in seeds]
        ).astype(np.float32)
        unit: Matrix = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        return unit


RARE = 500
"""Each episode also holds one of this many rare words (``w0`` … ``w499``)."""


def text(n: int) -> str:
    common = " ".join(WORDS[(n * k + k) % len(WORDS)] for k in range(1, 7))
    return f"{common} w{n % RARE} note {n}"


async def fill(db: Database, episodes: int, facts: int) -> None:
    batch: list[Episode] = []
    for n in range(episodes):
        batch.append(
            Episode(
                id=f"e{n:08d}",
                content=text(n),
                timestamp=T0 + timedelta(seconds=n),
                user=PARTITION.user,
                session=f"s{n % 10}",
                agent=PARTITION.agent,
            )
        )
        if len(batch) == 10_000:
            await db.memory.put_many(batch)
            batch = []
    await db.memory.put_many(batch)
    deltas = [
        AddDelta(
            user=PARTITION.user,
            agent=PARTITION.agent,
            source_episode_ids=[f"e{n % max(episodes, 1):08d}"],
            promotion_ts=T0,
            rule_id="bench",
            confidence=0.7,
            fact=FactPayload(subject=f"s{n}", predicate=WORDS[n % len(WORDS)], object=text(n)),
        )
        for n in range(facts)
    ]
    for i in range(0, len(deltas), 5000):
        await db.facts.apply_deltas(deltas[i : i + 5000])


def p50(values: list[float]) -> float:
    return statistics.median(values) * 1e3


async def vectors_on(location: str, args: argparse.Namespace) -> dict[str, Any]:
    embedder = RandomEmbedder(args.dimension)
    out: dict[str, Any] = {}
    async with open_database(location) as db:
        t = time.perf_counter()
        await fill(db, args.episodes, args.facts)
        out["fill_s"] = time.perf_counter() - t
        t = time.perf_counter()
        embedded = await db.vectors.catch_up(PARTITION.key, embedder)
        took = time.perf_counter() - t
        out["catch_up"] = (embedded, took, embedded / took)
        if db.backend == "postgresql":  # statistics, as autovacuum keeps them
            async with db.connection() as conn:  # type: ignore[attr-defined]
                await conn.execute("ANALYZE")
        idle: list[float] = []
        for _ in range(args.calls):
            t = time.perf_counter()
            await db.vectors.catch_up(PARTITION.key, embedder)
            idle.append(time.perf_counter() - t)
        out["idle_catch_up_p50_ms"] = p50(idle)
        rng = np.random.default_rng(5)
        window = (
            T0 + timedelta(seconds=args.episodes // 4),
            T0 + timedelta(seconds=args.episodes // 2),
        )
        shapes: list[tuple[Literal["episode", "fact"], str, dict[str, Any]]] = [
            ("episode", "episodes", {}),
            (
                "episode",
                "episodes, a time window (1/4 of them)",
                {"after_us": window[0], "before_us": window[1]},
            ),
            ("fact", "current facts", {}),
        ]
        for kind, label, extra in shapes:
            times: list[float] = []
            cpu: list[float] = []
            for _ in range(args.calls + 1):
                query = rng.standard_normal(args.dimension).astype(np.float32)
                query /= np.linalg.norm(query)
                t, c = time.perf_counter(), time.process_time()
                await db.vectors.nearest(
                    PARTITION.key,
                    kind,
                    embedder,
                    query,
                    limit=10,
                    **extra,
                )
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
            out[f"nearest {label}"] = (times[0] * 1e3, p50(times[1:]), p50(cpu[1:]))
        hits: list[float] = []
        for n in range(args.calls):
            t = time.perf_counter()
            await db.vectors.episode_text_hits(
                PARTITION.key, [f"w{n % RARE}", f"w{(n + 7) % RARE}"], limit=10
            )
            hits.append(time.perf_counter() - t)
        out["episode_text_hits_p50_ms"] = p50(hits)
    return out


async def on_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="bench-vectors-") as tmp:
            return await vectors_on(str(Path(tmp) / "m.db"), args)
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        return await vectors_on(f"{PG_URL}?schema={schema}", args)
    finally:
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# --- record p50 of two trees ----------------------------------------------------------------

CHILD = """
import asyncio, json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import bench_streaming as s
import stargraph_mem

async def main(records):
    pack = s.streaming_pack()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.db"
        await s.build(db, pack, 1000)
        wall, _, puts = await s.streaming(db, pack, records, warmup=50)
    print(json.dumps({"p50_ms": s.percentile(wall, 0.5) * 1e3,
                      "put_p50_ms": s.percentile(puts, 0.5) * 1e3,
                      "package": stargraph_mem.__file__}))

asyncio.run(main(int(sys.argv[2])))
"""


def record_p50(tree: Path, records: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(Path(__file__).resolve().parent), str(records)],
        env=env,
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["package"].startswith(str(tree.resolve())):
        raise SystemExit(f"the child imported {result['package']}, not the tree {tree}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="*", default=["sqlite", "postgresql"])
    parser.add_argument("--episodes", type=int, default=50_000)
    parser.add_argument("--facts", type=int, default=10_000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--calls", type=int, default=101, help="timed calls per shape")
    parser.add_argument("--record-trees", nargs=2, type=Path, metavar=("OLD", "NEW"))
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args()
    for backend in args.backends:
        r = asyncio.run(on_backend(backend, args))
        embedded, took, rate = r["catch_up"]
        print(
            f"[{backend}] {args.episodes:,} episodes + {args.facts:,} facts, dimension "
            f"{args.dimension} (filled in {r['fill_s']:.1f} s)"
        )
        print(
            f"  catch_up: {embedded:,} items embedded (+ full text) in {took:.2f} s "
            f"= {rate:,.0f} items/s"
        )
        print(f"  catch_up with nothing pending: p50 {r['idle_catch_up_p50_ms']:.3f} ms")
        for key, value in r.items():
            if key.startswith("nearest"):
                print(
                    f"  {key}: first call {value[0]:.1f} ms, then p50 {value[1]:.2f} ms "
                    f"(CPU time of the process, all threads: p50 {value[2]:.2f} ms)"
                )
        print(
            "  episode_text_hits (2 rare words, limit 10): "
            f"p50 {r['episode_text_hits_p50_ms']:.2f} ms",
            flush=True,
        )
    if args.record_trees:
        old, new = args.record_trees
        for pair in range(args.pairs):
            for label, tree in (("old", old), ("new", new)):
                r = record_p50(tree, args.records)
                print(
                    f"record p50 [{label} {tree}] pair {pair + 1}: {r['p50_ms']:.2f} ms "
                    f"(bare put p50 {r['put_p50_ms']:.2f} ms)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
