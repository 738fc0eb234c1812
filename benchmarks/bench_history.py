"""History aggregates at scale: one partition holding H episodes of history.

Three figures, each a ratio within one run:

* **batch**: consolidating the H episodes in one run with ``rules/frequency_promotion.yaml``
  (distinct sessions counted over history within 30 days, kept in durable aggregates)
  against ``rules/default.yaml`` (no aggregates);
* **streaming**: ``Consolidator.record`` p50 once those H episodes are consolidated, with
  ``frequency_promotion`` on ``every: 1`` (its counts read and write the aggregates of the
  keys each episode touches) against the same pack with ``over: pass`` counts (no
  aggregates): both over copies of the same database, the same facts and episodes;
* **state**: rows and bytes the aggregates hold per distinct key after H episodes (the
  sliding window keeps it bounded by the keys, not by the history).

    python benchmarks/bench_history.py --history 1000000 --records 300
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stargraph_mem.compiler.pack import CompiledPack, compile_text
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.fact import WatermarkAdvance
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.scope import Partition

ROOT = Path(__file__).resolve().parents[1]
PARTITION = Partition("bench-user", "bench-agent")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
STEP = timedelta(seconds=20)
"""Between two episodes: a million of them span about 231 days, all before the wall clock
(``record`` passes at the wall clock and leaves later episodes pending)."""


def pack(name: str, *, streaming: bool = False, history: bool = True) -> CompiledPack:
    text = (ROOT / "rules" / f"{name}.yaml").read_text(encoding="utf-8")
    if streaming:
        text = text.replace('{cron: "0 3 * * *"}', "{every: 1}")
    if not history:
        text = text.replace("over: history", "over: pass").replace(
            "          within: {days: 30}\n", ""
        )
        text = text.replace("pack: frequency_promotion", "pack: frequency_promotion_pass")
    return compile_text(text)


def observation(n: int, keys: int, rng: random.Random) -> Episode:
    key = rng.randrange(keys)
    return Episode(
        id=f"e{n:09d}",
        content=f"observation {n}",
        timestamp=T0 + n * STEP,
        user=PARTITION.user,
        session=f"s{n // 500}",  # a session is about four hours of episodes
        agent=PARTITION.agent,
        metadata={"subject": f"s{key // 10}", "predicate": "likes", "object": f"o{key % 10}"},
    )


async def ingest(db: Path, history: int, keys: int) -> None:
    rng = random.Random(7)
    async with Consolidator(db, [], keep_deltas=False) as mem:
        batch: list[Episode] = []
        for n in range(history):
            batch.append(observation(n, keys, rng))
            if len(batch) == 10_000:
                await mem.memory.put_many(batch)
                batch = []
        if batch:
            await mem.memory.put_many(batch)


async def consolidate(db: Path, compiled: CompiledPack, history: int) -> float:
    async with Consolidator(db, [compiled], keep_deltas=False) as mem:
        t = time.perf_counter()
        await mem.consolidate(now=T0 + history * STEP)
        return time.perf_counter() - t


async def mark_done(db: Path, compiled: CompiledPack) -> None:
    """The pack's watermarks at the end of the history (its passes would have read it)."""
    async with Consolidator(db, [compiled], keep_deltas=False) as mem:
        top = await mem.memory.max_seq(PARTITION)
        marks = [
            WatermarkAdvance(pack=compiled.name, rule_id=r.id, partition=PARTITION, last_seq=top)
            for r in compiled.rules
        ]
        await mem.fact_store.apply_deltas([], watermarks=marks)


async def records(
    db: Path, compiled: CompiledPack, start: int, count: int, keys: int
) -> list[float]:
    rng = random.Random(start)
    out: list[float] = []
    async with Consolidator(db, [compiled], keep_deltas=False) as mem:
        for k in range(count):
            episode = observation(start + k, keys, rng)
            t = time.perf_counter()
            report = await mem.record(episode)
            out.append(time.perf_counter() - t)
            assert report.passes and report.passes[0].episodes == 1
    return out


def state(db: Path) -> tuple[int, int, int]:
    """Keys, rows and bytes of the aggregates (markers left out)."""
    with sqlite3.connect(db) as conn:
        rows, size, keys = conn.execute(
            "SELECT count(*), sum(length(pack) + length(ref) + length(value) + length(last_id) "
            "+ length(data) + 24), count(DISTINCT ref) FROM aggregates WHERE value != '#kept'"
        ).fetchone()
    return int(keys or 0), int(rows or 0), int(size or 0)


async def measure(history: int, count: int, keys: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        base = Path(tmp) / "base.db"
        t = time.perf_counter()
        await ingest(base, history, keys)
        took = time.perf_counter() - t
        print(f"ingested {history:,} episodes over {keys:,} keys in {took:.1f} s")
        freq_db, default_db = Path(tmp) / "freq.db", Path(tmp) / "default.db"
        shutil.copy(base, freq_db)
        shutil.copy(base, default_db)
        base.unlink()
        freq_s = await consolidate(freq_db, pack("frequency_promotion"), history)
        default_s = await consolidate(default_db, pack("default"), history)
        default_db.unlink()
        print(
            f"batch: frequency_promotion {freq_s:.1f} s, default {default_s:.1f} s, "
            f"ratio {freq_s / default_s:.2f}"
        )
        keys_kept, rows, size = state(freq_db)
        per = max(keys_kept, 1)
        print(
            f"state: {keys_kept:,} keys, {rows:,} rows, {size:,} bytes "
            f"({size / per:.0f} bytes and {rows / per:.2f} rows per key)"
        )
        pass_db = Path(tmp) / "pass.db"
        shutil.copy(freq_db, pass_db)
        with_history = pack("frequency_promotion", streaming=True)
        without = pack("frequency_promotion", streaming=True, history=False)
        await mark_done(pass_db, without)
        a: list[float] = []
        b: list[float] = []
        for block in range(0, count, 50):  # alternate blocks: both see the same noise
            size_now = min(50, count - block)
            a += await records(freq_db, with_history, history + block, size_now, keys)
            b += await records(pass_db, without, history + block, size_now, keys)
        a, b = a[10:], b[10:]  # warm-up
        pa, pb = statistics.median(a), statistics.median(b)
        print(
            f"record p50: over history {pa * 1000:.2f} ms, over the pass {pb * 1000:.2f} ms, "
            f"ratio {pa / pb:.2f} ({len(a)} records each)"
        )
        print(f"state after the records: {state(freq_db)[1]:,} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--keys", type=int, default=1_000)
    args = parser.parse_args()
    asyncio.run(measure(args.history, args.records, args.keys))


if __name__ == "__main__":
    main()
