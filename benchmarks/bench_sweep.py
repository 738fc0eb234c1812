"""Sweep cost: a nightly sweep over N facts in P partitions, by its pre-filter's selectivity.

The store (SQLite) holds N current facts spread evenly over P partitions, confidences
uniform over 100 steps, all older than a day, built by the fact store's batch apply. A
nightly sweep deletes facts with confidence below a threshold: 0.01 (1 % of the facts
are candidates) and 0.1 (10 %). The full-scan baseline runs the same rule with the
pre-filter turned off (every partition's current facts loaded into CLIPS), as sweeping
without candidates would. Each variant runs on its own copy of the store. Sweep indexes
are made on demand: the sweep's own (the confidence index) is made before the timing, as
on a store that has swept before.

    python benchmarks/bench_sweep.py --facts 1000000 --partitions 10000

``--records N`` measures instead what a sweep costs a streaming ``record``: the p50 of N
records with an ``every: 1`` pack, with and without a nightly sweep rule added to it (the
median of each pack's p50s over ``--rounds`` interleaved runs, and the best), and their
ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.compiler.sweep_sql import SweepFilter, sweep_filter
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes import sweep
from stargraph_mem.stores.models import AddDelta, Episode, FactPayload
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
NOW = T0 + timedelta(days=2, hours=-8)  # 04:00, after the 03:00 fire
BATCH = 20_000


def pack(threshold: float) -> str:
    return f"""\
ir_version: 1
pack: nightly
version: "1.0.0"
defaults: {{cadence: {{cron: "0 3 * * *"}}}}
rules:
  - id: drop_weak
    when:
      - fact: {{as: f, confidence: {{lt: {threshold}}}, valid_from: {{older_than: {{days: 1}}}}}}
    emit: {{kind: delete, replaces: [f], sources: [f], reason: weak}}
"""


async def build(path: Path, facts: int, partitions: int) -> None:
    """``facts`` facts over ``partitions`` partitions, applied in batches."""
    store = SQLiteFactStore(path)
    await store.bootstrap()
    try:
        for start in range(0, facts, BATCH):
            deltas = [
                AddDelta(
                    fact=FactPayload(subject=f"s{n}", predicate="p", object=f"o{n}"),
                    user=f"u{n % partitions}",
                    agent="a",
                    source_episode_ids=[f"e{n}"],
                    promotion_ts=T0,
                    rule_id="seed",
                    confidence=(n * 37 % 100) / 100,
                )
                for n in range(start, min(facts, start + BATCH))
            ]
            await store.apply_deltas(deltas)
    finally:
        await store.close()


async def run(path: Path, threshold: float, full_scan: bool) -> tuple[float, int]:
    """Seconds of one ``consolidate`` of the sweep, and the deletes it applied.

    The indexes the sweep reads through are made first, outside the timing, as a store
    that has swept before has them (the first sweep on a store makes them: the time it
    took is printed)."""
    compiled = compile_text(pack(threshold))
    patch = mock.patch.object(
        sweep, "sweep_filter", lambda rule: SweepFilter("1 = 1", (), alone=False)
    )
    async with Consolidator(path, [compiled]) as mem:
        if not full_scan:
            indexes = sweep_filter(compiled.rules[0].program.info.rule).indexes
            t0 = time.perf_counter()
            await mem.fact_store.ensure_sweep_indexes(indexes)
            print(f"  made {', '.join(indexes)} in {time.perf_counter() - t0:.2f} s (once)")
        t0 = time.perf_counter()
        if full_scan:
            with patch:
                report = await mem.consolidate(now=NOW)
        else:
            report = await mem.consolidate(now=NOW)
        return time.perf_counter() - t0, report.counts["delete"]


async def main_async(facts: int, partitions: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.db"
        t0 = time.perf_counter()
        await build(base, facts, partitions)
        built = time.perf_counter() - t0
        print(f"built {facts:,} facts over {partitions:,} partitions in {built:.1f} s")
        results: dict[str, float] = {}
        for name, threshold, full in (
            ("sweep 1%", 0.01, False),
            ("sweep 10%", 0.1, False),
            ("full scan 1%", 0.01, True),
            ("full scan 10%", 0.1, True),
        ):
            copy = Path(tmp) / f"{name.replace(' ', '_').replace('%', '')}.db"
            shutil.copy(base, copy)
            seconds, deletes = await run(copy, threshold, full)
            results[name] = seconds
            print(f"{name:14} {seconds:8.2f} s  deletes={deletes:,}")
        for pct in ("1%", "10%"):
            ratio = results[f"full scan {pct}"] / results[f"sweep {pct}"]
            print(f"full scan ÷ sweep at {pct}: {ratio:.1f}x")


STREAMING = """\
ir_version: 1
pack: streaming
version: "1.0.0"
fields: {subject: string, predicate: string, object: string}
defaults: {cadence: {every: 1}, confidence: 0.3}
rules:
  - id: guess
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - not: {subject: {var: s}, predicate: {var: p}, object: {var: o}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
"""
SWEEP_RULE = """\
  - id: expire
    cadence: {cron: "0 4 * * *"}
    when:
      - fact: {as: f, confidence: {lt: 0.4}, valid_from: {older_than: {days: 30}}}
    emit: {kind: delete, replaces: [f], sources: [f]}
"""


async def record_p50(text: str, records: int) -> float:
    """p50 seconds of ``record`` (the first tenth left out as warm-up) on a fresh store."""
    with tempfile.TemporaryDirectory() as tmp:
        clock = T0 + timedelta(hours=1)
        async with Consolidator(
            Path(tmp) / "m.db", [compile_text(text)], clock=lambda: clock
        ) as mem:
            times: list[float] = []
            for i in range(records):
                meta = {"subject": f"s{i % 50}", "predicate": "p", "object": f"o{i}"}
                ep = Episode(
                    id=f"e{i}",
                    content="x",
                    timestamp=T0 + timedelta(seconds=i),
                    user="u",
                    session="s",
                    agent="a",
                    metadata=meta,
                )
                t0 = time.perf_counter()
                await mem.record(ep)
                times.append(time.perf_counter() - t0)
            return statistics.median(times[records // 10 :])


async def records_async(records: int, rounds: int) -> None:
    without: list[float] = []
    with_sweep: list[float] = []
    for _ in range(rounds):  # interleaved, so load from elsewhere hits both alike
        without.append(await record_p50(STREAMING, records))
        with_sweep.append(await record_p50(STREAMING + SWEEP_RULE, records))
    a, b = statistics.median(without), statistics.median(with_sweep)
    print(f"record p50 over {rounds} rounds, median: without a sweep {a * 1e3:.2f} ms, ", end="")
    print(f"with one {b * 1e3:.2f} ms; best {min(without) * 1e3:.2f} / {min(with_sweep) * 1e3:.2f}")
    print(f"ratio of medians {b / a:.3f}, of bests {min(with_sweep) / min(without):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=0, help="measure record p50 instead")
    parser.add_argument("--rounds", type=int, default=8, help="record runs of each pack")
    args = parser.parse_args()
    if args.records:
        asyncio.run(records_async(args.records, args.rounds))
    else:
        asyncio.run(main_async(args.facts, args.partitions))


if __name__ == "__main__":
    main()
