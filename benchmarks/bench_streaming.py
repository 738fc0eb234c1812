"""Streaming consolidation latency: ``Consolidator.record`` with an ``every: 1`` pack, from
the put to the facts being committed, against databases holding H episodes of history.

The measured partition holds the same 1,000 episodes (``--own``), consolidated for real:
about 150 current facts, as its episodes speak of 50 subjects (``--subjects``). The rest
of the history is spread over 1,000 other partitions, marked consolidated through their
watermarks. Only the size of the table changes between runs.
Each measured record puts one episode and runs the pass the cadence check fires. The
baseline does the same put and the same pass, but reads the whole episodes table each
time and keeps the partition's unconsolidated rows, as a scheduler without watermarks would.
A bare ``put`` of the same kind of episode (no cadence check, no pass), into a partition of
its own, is the floor: blocks of 50 records and 50 puts take turns in one process, so both
see the same machine, and the ratio record p50 ÷ put p50 is what consolidating on every
put costs on top of storing it (wall-clock; the last column is the same ratio of CPU
times, the figure to read on a machine other work loads).

The default stream is mostly adds and repeats (each episode's object is one of five);
``--stream updates`` gives each episode an object of its own, so once its subject and
predicate are known (after the build, every record) it contradicts the current fact and
the pass closes it, supersedes it, asserts the new one and audits both. ``--postgres URL``
runs the records and puts against a PostgreSQL schema of their own (no baseline there).

    python benchmarks/bench_streaming.py --sizes 1000 100000 1000000
    python benchmarks/bench_streaming.py --sizes 1000 --stream updates
    python benchmarks/bench_streaming.py --sizes 1000 --stream updates \
        --postgres postgresql://postgres@127.0.0.1:5432/test
    python benchmarks/bench_streaming.py --sizes 20000 --own 20000 --subjects 5000  # 11,000 facts
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stargraph_mem.compiler.pack import CompiledPack, compile_text
from stargraph_mem.engine.api import Consolidator, runtime_for
from stargraph_mem.stores.fact import Rejection, WatermarkAdvance
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_memory import row_record

ROOT = Path(__file__).resolve().parents[1]
PARTITION = Partition("bench-user", "bench-agent")
OTHERS = 1000
OWN = 1000
"""Episodes of the measured partition (``--own``)."""
SUBJECTS = 50
"""Subjects its episodes speak of (``--subjects``): with 3 predicates, up to 3 × this many
current facts."""
STREAM = "adds"
"""``adds``: objects drawn from five values; ``updates``: every episode's object its own."""
T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALL_ROWS = (
    "SELECT seq, id, content, ts_us, tz_offset_s, source_node, user, session, agent, metadata, "
    "last_accessed_us, access_count FROM episodes ORDER BY seq"
)


def streaming_pack() -> CompiledPack:
    """``rules/dedup_against_facts.yaml`` with every rule on ``every: 1``."""
    text = (ROOT / "rules" / "dedup_against_facts.yaml").read_text(encoding="utf-8")
    return compile_text(text.replace('{cron: "0 3 * * *"}', "{every: 1}"))


def observation(n: int, user: str, agent: str, rng: random.Random) -> Episode:
    return Episode(
        id=f"e{n:08d}",
        content=f"observation {n}",
        timestamp=T0 + timedelta(seconds=n),
        user=user,
        session=f"s{n % 10}",
        agent=agent,
        metadata={
            "subject": f"s{rng.randrange(SUBJECTS)}",
            "predicate": f"p{rng.randrange(3)}",
            "object": f"o{n}" if STREAM == "updates" else f"o{rng.randrange(5)}",
        },
    )


async def build(db: Path | str, pack: CompiledPack, history: int) -> int:
    """Put ``history`` episodes; consolidate the measured partition, mark the rest done."""
    rng = random.Random(7)
    own = min(OWN, history)
    async with Consolidator(db, [pack], keep_deltas=False) as mem:
        batch: list[Episode] = []
        for n in range(history):
            if n % (history // own) == 0 and n // (history // own) < own:
                batch.append(observation(n, PARTITION.user, PARTITION.agent, rng))
            else:
                batch.append(observation(n, f"u{n % OTHERS}", "rag", rng))
            if len(batch) == 10_000:
                await mem.memory.put_many(batch)
                batch = []
        await mem.memory.put_many(batch)
        advances = []
        for partition in await mem.memory.partitions():
            if partition == PARTITION:
                continue
            top = await mem.memory.max_seq(partition)
            advances += [
                WatermarkAdvance(pack=pack.name, rule_id=r.id, partition=partition, last_seq=top)
                for r in pack.rules
            ]
        await mem.fact_store.apply_deltas([], watermarks=advances)
        # at a time after every stored episode, so none is left pending for the records
        done_at = T0 + timedelta(seconds=history + 1)
        await mem.consolidate(user=PARTITION.user, agent=PARTITION.agent, now=done_at)
        return len(await mem.facts(user=PARTITION.user, agent=PARTITION.agent))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def streaming(
    db: Path | str, pack: CompiledPack, count: int, warmup: int, block: int = 50
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Wall-clock and CPU seconds (all threads of the process) per ``record`` (put, cadence
    check, pass committed), and the same per bare ``put``: blocks of ``block`` records and
    ``block`` puts in turn, in one process, so both see the same machine."""
    rng = random.Random(11)
    wall: list[float] = []
    cpu: list[float] = []
    puts: list[float] = []
    puts_cpu: list[float] = []
    async with Consolidator(db, [pack], keep_deltas=False) as mem:
        for k in range(warmup + count):
            episode = observation(10**7 + k, PARTITION.user, PARTITION.agent, rng)
            t, c = time.perf_counter(), time.process_time()
            report = await mem.record(episode)
            elapsed, used = time.perf_counter() - t, time.process_time() - c
            assert report.passes and report.passes[0].episodes == 1
            if k >= warmup:
                wall.append(elapsed)
                cpu.append(used)
            if k % block == block - 1:  # a block's puts are kept when its records are
                timed, used_cpu = await bare_puts(mem, rng, block, first=len(puts) + k + 1)
                puts += timed if k >= warmup else []
                puts_cpu += used_cpu if k >= warmup else []
    return wall, cpu, puts, puts_cpu


async def baseline(db: Path, pack: CompiledPack, count: int) -> list[float]:
    """Seconds per put + pass that re-reads the whole episodes table."""
    rng = random.Random(13)
    out: list[float] = []
    async with Consolidator(db, [pack], keep_deltas=False) as mem:
        runtime = runtime_for(pack)
        done = await mem.fact_store.watermark(pack.name, pack.rules[0].id, PARTITION)
        for k in range(count):
            episode = observation(2 * 10**7 + k, PARTITION.user, PARTITION.agent, rng)
            t = time.perf_counter()
            await mem.memory.put(
                episode, user=episode.user, session=episode.session, agent=episode.agent
            )
            records = await asyncio.to_thread(read_all, db, PARTITION, done)
            facts = await mem.fact_store.current_facts(PARTITION)
            result = runtime.run_pass(partition=PARTITION, now=T0, episodes=records, facts=facts)
            done = records[-1].seq
            await mem.fact_store.apply_deltas(
                result.deltas,
                pack_hash=runtime.sha256,
                watermarks=[
                    WatermarkAdvance(
                        pack=pack.name, rule_id=r.id, partition=PARTITION, last_seq=done
                    )
                    for r in pack.rules
                ],
                rejections=[
                    Rejection(
                        id=r.episode_id or "no-episode",
                        pack=pack.name,
                        rule_id=r.rule_id or "episode-metadata",
                        partition=PARTITION,
                        reason=r.reason,
                    )
                    for r in result.rejected
                ],
            )
            out.append(time.perf_counter() - t)
    return out


async def bare_puts(
    mem: Consolidator, rng: random.Random, count: int, first: int
) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds per bare ``put`` of the same kind of episode (ids from
    ``first`` on), into a partition of their own: each record's pass still consumes one
    episode."""
    out: list[float] = []
    cpu: list[float] = []
    for k in range(first, first + count):
        episode = observation(3 * 10**7 + k, PUT_USER, PARTITION.agent, rng)
        t, c = time.perf_counter(), time.process_time()
        await mem.memory.put(
            episode, user=episode.user, session=episode.session, agent=episode.agent
        )
        out.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return out, cpu


PUT_USER = "bench-put-user"
"""The partition bare puts go to."""


def read_all(db: Path, partition: Partition, after: int) -> list[EpisodeRecord]:
    """Every row of the table, decoded; the partition's rows after ``after`` kept."""
    conn = sqlite3.connect(db)
    try:
        rows = [row_record(row) for row in conn.execute(ALL_ROWS)]
    finally:
        conn.close()
    return [
        r for r in rows if (r.user, r.agent) == (partition.user, partition.agent) and r.seq > after
    ]


async def measure(
    history: int, count: int, baseline_count: int, postgres: str | None = None
) -> dict[str, float]:
    pack = streaming_pack()
    with tempfile.TemporaryDirectory(prefix="bench-streaming-") as tmp:
        schema = f"bench_streaming_{uuid.uuid4().hex[:12]}"
        db: Path | str = Path(tmp) / "m.db" if postgres is None else f"{postgres}?schema={schema}"
        try:
            t = time.perf_counter()
            facts = await build(db, pack, history)
            built = time.perf_counter() - t
            times, cpu, puts, puts_cpu = await streaming(db, pack, count, warmup=50)
            base = await baseline(db, pack, baseline_count) if isinstance(db, Path) else []
        finally:
            if postgres is not None:
                await drop_schema(postgres, schema)
    return {
        "history": history,
        "facts": facts,
        "build_s": built,
        "p50_ms": percentile(times, 0.5) * 1e3,
        "p99_ms": percentile(times, 0.99) * 1e3,
        "p999_ms": percentile(times, 0.999) * 1e3,
        "max_ms": max(times) * 1e3,
        "mean_ms": statistics.fmean(times) * 1e3,
        "cpu_p50_ms": percentile(cpu, 0.5) * 1e3,
        "baseline_p50_ms": percentile(base, 0.5) * 1e3 if base else float("nan"),
        "put_p50_ms": percentile(puts, 0.5) * 1e3,
        "put_cpu_p50_ms": percentile(puts_cpu, 0.5) * 1e3,
    }


async def drop_schema(postgres: str, schema: str) -> None:
    """Drop the benchmark's PostgreSQL schema."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    global OWN, SUBJECTS, STREAM
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--records", type=int, default=1000, help="measured records per size")
    parser.add_argument("--baseline-records", type=int, default=20)
    parser.add_argument(
        "--own", type=int, default=OWN, help="episodes of the measured partition (at most H)"
    )
    parser.add_argument(
        "--subjects", type=int, default=SUBJECTS, help="subjects its episodes speak of"
    )
    parser.add_argument(
        "--stream",
        choices=["adds", "updates"],
        default=STREAM,
        help="adds: objects from five values (mostly adds and repeats); updates: every "
        "episode's object its own, so nearly every record updates a fact",
    )
    parser.add_argument("--postgres", metavar="URL", help="measure PostgreSQL at this URL")
    args = parser.parse_args()
    OWN, SUBJECTS, STREAM = args.own, args.subjects, args.stream
    print(
        "history    facts  build s  p50 ms  p99 ms  p99.9 ms  max ms  mean ms  cpu p50 ms"
        "  baseline p50 ms  ratio  put p50 ms  record/put  put cpu p50 ms  cpu record/put"
    )
    for size in args.sizes:
        base_count = args.baseline_records if size < 500_000 else max(3, args.baseline_records // 4)
        r = asyncio.run(measure(size, args.records, base_count, args.postgres))
        ratio = r["baseline_p50_ms"] / r["p50_ms"]
        print(
            f"{int(r['history']):>9,}  {int(r['facts']):>5}  {r['build_s']:>7.1f}  "
            f"{r['p50_ms']:>6.2f}  {r['p99_ms']:>6.2f}  {r['p999_ms']:>8.2f}  {r['max_ms']:>6.2f}  "
            f"{r['mean_ms']:>7.2f}  "
            f"{r['cpu_p50_ms']:>10.2f}  "
            f"{r['baseline_p50_ms']:>15.1f}  {ratio:>5.0f}x  {r['put_p50_ms']:>10.2f}  "
            f"{r['p50_ms'] / r['put_p50_ms']:>9.1f}x  {r['put_cpu_p50_ms']:>14.2f}  "
            f"{r['cpu_p50_ms'] / r['put_cpu_p50_ms']:>12.1f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
