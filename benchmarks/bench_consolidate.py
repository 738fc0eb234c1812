"""End-to-end consolidation throughput: SQLite read → CLIPS → deltas → facts committed.

Runs ``rules/default.yaml`` over N synthetic episodes of one partition (500 hot subject
keys) and, as the baseline, a pure-Python implementation of the same classification table
feeding the same fact store. Each size runs in a fresh subprocess so peak RSS is per run;
a run that uses a consolidation worker process reports the worker's peak separately (the
two processes run at the same time, so their sum bounds the total).

    python benchmarks/bench_consolidate.py --sizes 10000 100000 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.fact import WatermarkAdvance
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import (
    AddDelta,
    DeleteDelta,
    Episode,
    FactPayload,
    MemoryDelta,
    NoopDelta,
    UpdateDelta,
)
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 6, 1, tzinfo=UTC)
PARTITION = Partition("bench-user", "bench-agent")
PACK = Path(__file__).resolve().parents[1] / "rules" / "default.yaml"


def episodes(n: int, seed: int = 42) -> Iterator[list[Episode]]:
    """Deterministic synthetic episodes in batches of 10,000: 3 % noop intents, the rest
    subject/predicate/object (generated per batch so the input never sits in memory whole)."""
    rng = random.Random(seed)
    batch: list[Episode] = []
    for i in range(n):
        meta: dict[str, Any]
        if rng.random() < 0.03:
            meta = {"intent": "noop"}
        else:
            meta = {
                "subject": f"s{rng.randrange(500)}",
                "predicate": f"p{rng.randrange(5)}",
                "object": f"o{rng.randrange(20)}",
            }
        batch.append(
            Episode(
                id=f"e{i}",
                content=f"episode {i}",
                timestamp=T0 + timedelta(seconds=i),
                user=PARTITION.user,
                session=f"s{i // 1000}",
                agent=PARTITION.agent,
                metadata=meta,
            )
        )
        if len(batch) == 10_000:
            yield batch
            batch = []
    if batch:
        yield batch


async def load(path: Path, n: int) -> float:
    start = time.perf_counter()
    async with SQLiteMemoryStore(path) as store:
        for batch in episodes(n):
            await store.put_many(batch)
    return time.perf_counter() - start


def python_table(
    records: list[EpisodeRecord], fact_ids: dict[tuple[str, str], str]
) -> list[MemoryDelta]:
    """The default classification table written directly in Python (the baseline)."""
    out: list[MemoryDelta] = []
    common = {
        "user": PARTITION.user,
        "agent": PARTITION.agent,
        "promotion_ts": NOW,
        "confidence": 0.8,
    }
    for r in records:
        m = r.metadata
        intent = m.get("intent")
        if intent == "noop":
            out.append(
                NoopDelta(
                    source_episode_ids=[r.id],
                    rule_id="explicit_noop",
                    reason="intent noop",
                    **common,
                )
            )
            continue
        if intent == "delete" and m.get("replaces"):
            out.append(
                DeleteDelta(
                    source_episode_ids=[r.id],
                    rule_id="explicit_delete",
                    replaces=m["replaces"],
                    **common,
                )
            )
            continue
        s, p, o = m.get("subject"), m.get("predicate"), m.get("object")
        if not (isinstance(s, str) and isinstance(p, str) and isinstance(o, str)):
            continue
        fact = FactPayload(subject=s, predicate=p, object=o)
        key = (s, p)
        delta: AddDelta | UpdateDelta
        if key in fact_ids:
            delta = UpdateDelta(
                source_episode_ids=[r.id],
                rule_id="repeat_updates_earlier",
                replaces=[fact_ids[key]],
                fact=fact,
                reason=f"repeated ({s}, {p}) in one pass",
                **common,
            )
        else:
            delta = AddDelta(
                source_episode_ids=[r.id],
                rule_id="add_observation",
                fact=fact,
                reason="new observation",
                **common,
            )
        fact_ids[key] = delta.new_fact_id
        out.append(delta)
    return out


async def run_engine(path: Path, max_episodes: int) -> dict[str, Any]:
    start = time.perf_counter()
    async with Consolidator.open(path, [PACK], max_episodes=max_episodes, keep_deltas=False) as mem:
        reports = (await mem.consolidate(now=NOW)).passes
    elapsed = time.perf_counter() - start
    timings = {k: round(sum(r.timings[k] for r in reports), 2) for k in ("read", "engine", "apply")}
    return {
        "seconds": elapsed,
        "passes": len(reports),
        "deltas": sum(sum(r.counts.values()) for r in reports),
        **timings,
    }


async def run_baseline(path: Path, max_episodes: int) -> dict[str, Any]:
    start = time.perf_counter()
    passes = deltas = 0
    async with SQLiteMemoryStore(path) as memory, SQLiteFactStore(path) as facts:
        after = 0
        while True:
            records = await memory.since(PARTITION, after, limit=max_episodes)
            batch = python_table(records, {})
            high = records[-1].seq if records else after
            await facts.apply_deltas(
                batch,
                pack_hash="python-baseline",
                watermarks=[
                    WatermarkAdvance(
                        pack="baseline", rule_id="table", partition=PARTITION, last_seq=high
                    )
                ]
                if records
                else [],
            )
            passes += 1
            deltas += len(batch)
            after = high
            if len(records) < max_episodes:
                break
    return {"seconds": time.perf_counter() - start, "passes": passes, "deltas": deltas}


def child(mode: str, n: int, max_episodes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        load_s = asyncio.run(load(path, n))
        runner = run_engine if mode == "engine" else run_baseline
        result = asyncio.run(runner(path, max_episodes))
        result.update(
            mode=mode,
            n=n,
            load_s=round(load_s, 2),
            peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            # the consolidation worker process, if the run used one (0 otherwise)
            worker_peak_rss_mb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024,
        )
        print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--max-episodes", type=int, default=50_000, help="episodes per pass")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.max_episodes)
        return
    print(
        f"{'size':>9} {'mode':>8} {'seconds':>8} {'episodes/s':>11} {'ratio':>6}"
        f" {'peak MB':>8} {'worker MB':>9} passes  read/engine/apply s"
    )
    for n in args.sizes:
        results = {}
        for mode in ("engine", "python"):
            cmd = [
                sys.executable,
                __file__,
                "--child",
                mode,
                str(n),
                "--max-episodes",
                str(args.max_episodes),
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
            results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
        base = results["python"]["seconds"]
        for mode, r in results.items():
            split = f"{r.get('read', '-')}/{r.get('engine', '-')}/{r.get('apply', '-')}"
            print(
                f"{n:>9} {mode:>8} {r['seconds']:>8.2f} {n / r['seconds']:>11,.0f} "
                f"{r['seconds'] / base:>6.2f} {r['peak_rss_mb']:>8} "
                f"{r.get('worker_peak_rss_mb', 0):>9} {r['passes']:>6}  {split}"
            )


if __name__ == "__main__":
    main()
