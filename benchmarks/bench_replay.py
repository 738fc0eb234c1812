"""Replay throughput: copy the episode log, consolidate it under a changed pack, diff facts.

A database of N synthetic episodes (100 users, one agent, 10 predicates × 20 objects per
user, sessions of 50 episodes) is consolidated in place with ``rules/frequency_promotion
.yaml`` (the engine baseline, timed), then replayed with the same pack at threshold 2
instead of 3 (timed per phase: copy, consolidate, diff). Each size runs in a fresh
subprocess so peak RSS is per run; the real database's sha256 is checked afterwards.

    python benchmarks/bench_replay.py --sizes 100000 1000000
    python benchmarks/bench_replay.py --sizes 1000000 --no-baseline
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
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

from stargraph_mem.authoring.replay import replay
from stargraph_mem.compiler.pack import compile_file, compile_text
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 6, 1, tzinfo=UTC)
PACK = Path(__file__).resolve().parents[1] / "rules" / "frequency_promotion.yaml"
USERS = 100
BATCH = 10_000


def batches(n: int, seed: int = 7) -> Iterator[list[Episode]]:
    """Deterministic episodes in batches (never all of them in memory at once)."""
    rng = random.Random(seed)
    batch: list[Episode] = []
    for i in range(n):
        user = f"u{i % USERS}"
        batch.append(
            Episode(
                id=f"e{i}",
                content=f"episode {i}",
                timestamp=T0 + timedelta(seconds=i),
                user=user,
                session=f"s{i // (USERS * 50)}",
                agent="rag",
                metadata={
                    "subject": user,
                    "predicate": f"p{rng.randrange(10)}",
                    "object": f"o{rng.randrange(20)}",
                },
            )
        )
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


async def load(path: Path, n: int) -> float:
    start = time.perf_counter()
    async with SQLiteMemoryStore(path) as store:
        for batch in batches(n):
            await store.put_many(batch)
    return time.perf_counter() - start


async def consolidate(path: Path) -> float:
    start = time.perf_counter()
    async with Consolidator.open(path, [PACK]) as mem:
        await mem.consolidate(now=NOW)
    return time.perf_counter() - start


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def child(n: int, baseline: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "real.db"
        result: dict[str, Any] = {"n": n, "load_s": round(asyncio.run(load(path, n)), 2)}
        if baseline:
            result["baseline_s"] = round(asyncio.run(consolidate(path)), 2)
        before = sha256(path)
        changed = compile_text(PACK.read_text().replace("at_least: 3", "at_least: 2"), "new.yaml")
        compile_file(PACK)  # warm the compiler as the baseline did
        start = time.perf_counter()
        out = asyncio.run(replay(path, [changed], now=NOW))
        result.update(
            replay_s=round(time.perf_counter() - start, 2),
            **{f"{k}_s": round(v, 2) for k, v in out.timings.items() if k != "total"},
            **out.counts(),
            unchanged_hash=sha256(path) == before,
            peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        )
        print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument(
        "--no-baseline", action="store_true", help="do not consolidate the real database first"
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, not args.no_baseline)
        return
    print(
        f"{'size':>9} {'baseline s':>10} {'replay s':>9} {'episodes/s':>11} {'ratio':>6} "
        f"{'peak MB':>8}  copy/consolidate/diff s  appear/change/unchanged  hash kept"
    )
    for n in args.sizes:
        cmd = [sys.executable, __file__, "--child", str(n)]
        cmd += ["--no-baseline"] if args.no_baseline else []
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        base = r.get("baseline_s")
        ratio = f"{r['replay_s'] / base:.2f}" if base else "-"
        print(
            f"{n:>9} {base or '-':>10} {r['replay_s']:>9.2f} {n / r['replay_s']:>11,.0f} "
            f"{ratio:>6} {r['peak_rss_mb']:>8}  "
            f"{r['copy_s']}/{r['consolidate_s']}/{r['diff_s']}  "
            f"{r['appear']}/{r['change']}/{r['unchanged']}  {r['unchanged_hash']}"
        )


if __name__ == "__main__":
    main()
