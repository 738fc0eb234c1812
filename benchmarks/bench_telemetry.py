"""What OpenTelemetry costs: streaming ``record`` p50 and a nightly pass over 40,000
episodes, with the SDK configured (metrics into an ``InMemoryMetricReader``, spans into an
``InMemorySpanExporter``) and without it (the API's no-ops), in one process.

Spans reach the exporter through a ``BatchSpanProcessor``, as an operator wires one (spans
queue and a thread exports them); ``--processor simple`` exports each span as it ends
(a ``SimpleSpanProcessor``, what tests use). The exporter is emptied between blocks,
outside the timings, as a collector would take the spans away: a process that keeps every
span it ever made would measure its own growing heap.

- Streaming: the ``bench_streaming.py`` setup (an ``every: 1`` pack, a partition holding
  1,000 consolidated episodes); blocks of ``--block`` records with and without the SDK
  take turns, so both see the same machine; p50 of each (wall clock, and CPU time of the
  process: steadier on a busy machine), their ratios, and the median of the ratios of
  neighbouring blocks' p50s (a load that changes between blocks moves both sides of one).
- Nightly: ``rules/default.yaml`` over ``--episodes`` episodes in ``--partitions``
  partitions, consolidated on identical fresh databases, without and with the SDK, in
  ``--nightly-rounds`` pairs (3), each pass in a fresh process of its own; the first pair
  runs without then with (``--order with-first`` swaps them) and each next pair swaps
  again. Passes run one after the other in one process differed by 0.94–1.26 between the
  two sides of a pair, whichever ran first (a heap the earlier passes grew), which one
  process reads as the SDK's cost. Seconds of each (wall clock and CPU), the ratio of the
  medians and each pair's.

    python benchmarks/bench_telemetry.py                      # about 3 minutes
    python benchmarks/bench_telemetry.py --episodes 8000 --partitions 400 --records 200
    python benchmarks/bench_telemetry.py --skip nightly --sample 0.01  # 1 % of traces
    python benchmarks/bench_telemetry.py --skip nightly --records 4000 --processor simple
    valgrind --tool=callgrind python benchmarks/bench_telemetry.py --skip nightly \
        --records 400 --block 10 --side with   # and --side without: instructions per record
    valgrind --tool=callgrind python benchmarks/bench_telemetry.py --calls 2000 \
        --processor simple   # and --calls 0: instructions of a record's telemetry calls

``--calls N`` makes no store pass: it runs the telemetry calls of one ``record`` alone
(record span, the pass folded into it, its durations, its report) N times with the SDK,
then collects the metrics once, as a reader would; instructions per record = (count of N
− count of 0) / N. The collection (the counting and durations put off until then) is part
of that; ``--no-collect`` leaves it out: what the record itself pays. Without the set-up
and its noise (a run of 0 differs from the set-up of a run of N by a few million
instructions): ``valgrind --tool=callgrind --collect-atstart=no
--toggle-collect=_operator_call`` counts the N records' calls alone (the collection not
included), exact to a few hundred instructions per record.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import operator
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench_streaming import PARTITION, build, observation, streaming_pack
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from stargraph_mem import telemetry
from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes import observe
from stargraph_mem.engine.passes.report import ConsolidationReport
from stargraph_mem.stores.models import Episode
from stargraph_mem.telemetry import PassSpan

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 2, 1, tzinfo=UTC)


class Sdk:
    """The SDK's in-memory reader and exporter, switched on and off for the package."""

    def __init__(self, sample: float = 1.0, processor: str = "batch") -> None:
        self.reader = InMemoryMetricReader()
        self.exporter = InMemorySpanExporter()
        sampler = ParentBased(TraceIdRatioBased(sample)) if sample < 1.0 else None
        self.tracer = TracerProvider(sampler=sampler)
        self.processor = (
            BatchSpanProcessor(self.exporter)
            if processor == "batch"
            else SimpleSpanProcessor(self.exporter)
        )
        self.tracer.add_span_processor(self.processor)
        self.meter = MeterProvider(metric_readers=[self.reader])
        self.spans = 0
        """Spans exported and taken away (see :meth:`drain`)."""

    def on(self) -> None:
        telemetry.configure(self.meter, self.tracer)

    @staticmethod
    def off() -> None:
        telemetry.configure()

    def drain(self) -> None:
        """Export what waits, count the exported spans and let them go."""
        self.processor.force_flush()
        self.spans += len(self.exporter.get_finished_spans())
        self.exporter.clear()

    def seen(self) -> tuple[int, int]:
        """Spans exported and metric data points collected so far."""
        self.drain()
        data = self.reader.get_metrics_data()
        points = 0
        if data is not None:
            for resource in data.resource_metrics:
                for scope in resource.scope_metrics:
                    points += sum(len(m.data.data_points) for m in scope.metrics)
        return self.spans, points


async def streaming(
    sdk: Sdk, db: Path, records: int, block: int, warmup: int, side: str | None = None
) -> None:
    """Record p50 with and without the SDK, in alternating blocks; with ``side``, every
    block on that side only (two runs under ``valgrind --tool=callgrind`` then count the
    instructions the SDK adds, whatever the machine's load)."""
    import random

    pack = streaming_pack()
    await build(db, pack, 1000)
    rng = random.Random(11)
    # per block: (with the SDK, wall seconds of each record, CPU seconds of each record)
    blocks: list[tuple[bool, list[float], list[float]]] = []
    async with Consolidator(db, [pack], keep_deltas=False) as mem:
        for k in range(warmup + records):
            with_sdk = (k // block) % 2 == 1 if side is None else side == "with"
            if k % block == 0:
                sdk.drain()
                sdk.on() if with_sdk else sdk.off()
                if k >= warmup:
                    blocks.append((with_sdk, [], []))
            episode = observation(10**7 + k, PARTITION.user, PARTITION.agent, rng)
            t, c = time.perf_counter(), time.process_time()
            report = await mem.record(episode)
            elapsed, used = time.perf_counter() - t, time.process_time() - c
            assert report.passes and report.passes[0].episodes == 1
            if blocks:  # from the first block after the warm-up
                blocks[-1][1].append(elapsed)
                blocks[-1][2].append(used)
    sdk.off()
    if side is not None:
        return
    for label, column in (("wall", 1), ("CPU", 2)):
        times = [(b[0], b[1] if column == 1 else b[2]) for b in blocks]
        found = {
            on: [s for sdk_on, ts in times if sdk_on == on for s in ts] for on in (False, True)
        }
        without, with_ = statistics.median(found[False]), statistics.median(found[True])
        pairs = [
            statistics.median(times[i + 1][1]) / statistics.median(times[i][1])
            for i in range(len(times) - 1)
            if not times[i][0] and times[i + 1][0]
        ]
        print(
            f"streaming record p50 ({label}): {without * 1e3:.3f} ms without, {with_ * 1e3:.3f} "
            f"ms with the SDK ({len(found[False])} / {len(found[True])} records), ratio "
            f"{with_ / without:.3f}; median of {len(pairs)} block ratios "
            f"{statistics.median(pairs):.3f}",
            flush=True,
        )


async def a_record(tmp: Path) -> tuple[str, int, ConsolidationReport]:
    """A streaming record's pack, rule count and report (the third record of a fresh
    partition: its pass applied deltas)."""
    import random

    pack = streaming_pack()
    rng = random.Random(3)
    async with Consolidator(tmp / "calls.db", [pack], keep_deltas=False) as mem:
        for k in range(3):
            report = await mem.record(observation(k, PARTITION.user, PARTITION.agent, rng))
    return pack.name, len(pack.rules), report


def calls(sdk: Sdk, pack: str, rules: int, report: ConsolidationReport, n: int) -> None:
    """The telemetry calls a ``record`` makes around its put and pass, ``n`` times (the
    runner's order: record span, pass span, its phases and apply, durations, end; the
    report after the record's span), exporter emptied every 10 records."""
    timings = report.passes[0].timings
    read, engine, apply = timings["read"], timings["engine"], timings["apply"]
    sdk.on()
    for k in range(n):
        with telemetry.record_span():
            traced = PassSpan(pack, rules, 1)
            with traced.current():
                pass
            traced.phases(read, engine, 1)
            with traced.apply():
                pass
            traced.timed(read + engine, apply)
            traced.end()
        observe.report(report)
        if k % 10 == 9:
            sdk.drain()
    sdk.off()


def nightly_episodes(total: int, partitions: int) -> list[Episode]:
    """``total`` episodes over ``partitions`` users (as ``bench_partitions.py`` writes)."""
    each = total // partitions
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


async def nightly_child(sdk: Sdk, tmp: Path, total: int, partitions: int, with_sdk: bool) -> None:
    """One nightly pass in this (fresh) process: prints ``wall cpu`` seconds."""
    pack = compile_file(ROOT / "rules" / "default.yaml")
    episodes = nightly_episodes(total, partitions)
    db = Path(tempfile.mkdtemp(dir=tmp)) / "m.db"
    async with Consolidator(db, [pack], keep_deltas=False) as mem:
        for start in range(0, len(episodes), 10_000):
            await mem.memory.put_many(episodes[start : start + 10_000])
        sdk.on() if with_sdk else sdk.off()
        gc.collect()
        t, c = time.perf_counter(), time.process_time()
        report = await mem.consolidate(now=NOW)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        sdk.off()
        sdk.drain()
        assert report.episodes == len(episodes), report.episodes
    print(f"{wall} {cpu} {len(report.passes)} {sum(report.counts.values())}")


def nightly(total: int, partitions: int, with_first: bool, rounds: int, processor: str) -> None:
    """Seconds of one ``consolidate`` over ``total`` episodes, without and with the SDK:
    ``rounds`` pairs, each pass in a fresh process of its own (passes run one after the
    other in one process see a heap the earlier ones grew: 0.94–1.26 between the two
    sides of a pair, whichever ran first), the order swapped every pair; the ratio of the
    medians and each pair's."""
    seconds: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        first = with_first if r % 2 == 0 else not with_first
        for with_sdk in (first, not first):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--nightly-child",
                    "with" if with_sdk else "without",
                    "--episodes",
                    str(total),
                    "--partitions",
                    str(partitions),
                    "--processor",
                    processor,
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()
            wall, used, passes, deltas = float(out[0]), float(out[1]), out[2], out[3]
            seconds[with_sdk].append(wall)
            cpu[with_sdk].append(used)
            print(
                f"nightly pass {'with' if with_sdk else 'without'} the SDK: {wall:.2f} s, "
                f"CPU {used:.2f} s ({passes} pass reports, {deltas} deltas)",
                flush=True,
            )
    wall_med = {k: statistics.median(v) for k, v in seconds.items()}
    used_med = {k: statistics.median(v) for k, v in cpu.items()}
    pairs = [w / wo for w, wo in zip(seconds[True], seconds[False], strict=True)]
    print(
        f"nightly pass over {total:,} episodes in {partitions:,} partitions, {rounds} "
        f"pair(s), a process each: median {wall_med[False]:.2f} s without, "
        f"{wall_med[True]:.2f} s with the SDK, ratio {wall_med[True] / wall_med[False]:.3f} "
        f"(CPU {used_med[False]:.2f} s / {used_med[True]:.2f} s, ratio "
        f"{used_med[True] / used_med[False]:.3f}); each pair's ratio "
        + " ".join(f"{x:.3f}" for x in pairs),
        flush=True,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=600)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--episodes", type=int, default=40_000)
    parser.add_argument("--partitions", type=int, default=2_000)
    parser.add_argument("--order", choices=["without-first", "with-first"], default="without-first")
    parser.add_argument(
        "--nightly-rounds",
        type=int,
        default=3,
        help="nightly: pairs of passes (without and with the SDK), the order swapped each",
    )
    parser.add_argument("--skip", choices=["streaming", "nightly"], default=None)
    parser.add_argument(
        "--side",
        choices=["with", "without"],
        default=None,
        help="streaming: every record with (or without) the SDK, for instruction counts",
    )
    parser.add_argument(
        "--sample", type=float, default=1.0, help="share of traces the SDK samples (1: all)"
    )
    parser.add_argument(
        "--processor",
        choices=["batch", "simple"],
        default="batch",
        help="the span processor: BatchSpanProcessor (as operators wire it) or Simple",
    )
    parser.add_argument(
        "--calls",
        type=int,
        default=None,
        help="only a record's telemetry calls, this many times (no store; see above)",
    )
    parser.add_argument(
        "--no-collect", action="store_true", help="--calls: collect no metrics at the end"
    )
    parser.add_argument("--nightly-child", choices=["with", "without"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.nightly_child is not None:
        with tempfile.TemporaryDirectory() as tmp:
            await nightly_child(
                Sdk(args.sample, args.processor),
                Path(tmp),
                args.episodes,
                args.partitions,
                args.nightly_child == "with",
            )
        return
    print(f"load average: {Path('/proc/loadavg').read_text().split()[:3]}", flush=True)
    if args.calls is not None:
        sdk = Sdk(args.sample, args.processor)
        with tempfile.TemporaryDirectory() as tmp:
            pack, rules, report = await a_record(Path(tmp))
        # through operator.call: callgrind --collect-atstart=no --toggle-collect=_operator_call
        # counts these calls only
        operator.call(calls, sdk, pack, rules, report, args.calls)
        sdk.drain()
        if not args.no_collect:
            sdk.seen()
        print(f"{args.calls} records' telemetry calls: the SDK saw {sdk.spans:,} spans")
        return
    sdk = Sdk(args.sample, args.processor)
    with tempfile.TemporaryDirectory() as tmp:
        if args.skip != "streaming":
            db = Path(tmp) / "stream.db"
            await streaming(sdk, db, args.records, args.block, args.warmup, args.side)
        if args.skip != "nightly":
            with_first = args.order == "with-first"
            nightly(args.episodes, args.partitions, with_first, args.nightly_rounds, args.processor)
    spans, points = sdk.seen()
    print(f"the SDK saw {spans:,} spans and holds {points} metric data points")


if __name__ == "__main__":
    asyncio.run(main())
