"""Consolidation of many small partitions: ``Consolidator.consolidate`` with
``rules/default.yaml`` over P partitions of E episodes each, one pass per partition.

Measures the fixed cost of a partition pass (claiming the partition, reading its
watermarks, version, episodes and facts, applying and giving the claim up). Run it from
two checkouts side by side to compare commits:

    python benchmarks/bench_partitions.py --partitions 200 1000 --each 20
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.models import Episode

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "rules" / "default.yaml"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 2, 1, tzinfo=UTC)


def episodes(partitions: int, each: int) -> list[Episode]:
    return [
        Episode(
            id=f"p{p}-e{n}",
            content=f"user{p} fact {n}",
            timestamp=T0 + timedelta(seconds=n),
            user=f"user{p}",
            session=f"s{n % 3}",
            agent="rag",
            metadata={"subject": f"user{p}", "predicate": f"k{n % 7}", "object": f"v{n}"},
        )
        for p in range(partitions)
        for n in range(each)
    ]


async def measure(db: Path, partitions: int, each: int) -> tuple[float, int]:
    async with Consolidator.open(db, [PACK], keep_deltas=False, worker="never") as mem:
        await mem.memory.put_many(episodes(partitions, each))
        t0 = time.perf_counter()
        reports = (await mem.consolidate(now=NOW)).passes
        return time.perf_counter() - t0, sum(r.episodes for r in reports)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--each", type=int, default=20, help="episodes per partition")
    args = parser.parse_args()
    print(f"{'partitions':>10} {'episodes':>9} {'seconds':>8} {'ms/partition':>13}")
    for partitions in args.partitions:
        with tempfile.TemporaryDirectory() as tmp:
            seconds, count = asyncio.run(measure(Path(tmp) / "m.db", partitions, args.each))
        print(f"{partitions:>10,} {count:>9,} {seconds:>8.2f} {seconds / partitions * 1e3:>13.2f}")


if __name__ == "__main__":
    main()
