"""Several scheduler processes consolidating one memory: PostgreSQL with 1, 2 and 4 worker
processes, and SQLite with one, over the same episodes.

Each run starts from a fresh database (PostgreSQL: a fresh schema of the server at
``--url``) holding P partitions of E episodes (``stargraph-mem ingest``), then launches
the workers at once: each ticks ``rules/default.yaml`` (its nightly cron is due for every
partition) until a tick finds nothing due, leasing partitions as it goes. The figure is
the wall time from launch until the last worker exits; afterwards the run checks that
every partition was consolidated and that no delta was applied twice. Beside it: the CPU
seconds the workers used (user + system, all of them) and, when the PostgreSQL server
runs on this machine, the CPU seconds its processes used meanwhile (read from ``/proc``;
``-`` when there are none to read), so the server's share of the work shows.

    python benchmarks/bench_workers.py --partitions 10000 --each 4 --workers 1 2 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "rules" / "default.yaml"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
CLI = "from stargraph_mem.cli import main; main()"


def write_episodes(path: Path, partitions: int, each: int) -> None:
    """``each`` episodes for each of ``partitions`` users of agent ``rag``, as JSON lines."""
    with path.open("wb") as out:
        for p in range(partitions):
            for n in range(each):
                doc = {
                    "id": f"e{p}-{n}",
                    "content": f"user{p} likes thing{n % 3}",
                    "timestamp": (T0 + timedelta(seconds=n)).isoformat(),
                    "user": f"user{p}",
                    "session": "s1",
                    "agent": "rag",
                    "metadata": {
                        "subject": f"user{p}",
                        "predicate": "likes",
                        "object": f"thing{n % 3}",
                    },
                }
                out.write(orjson.dumps(doc) + b"\n")


async def work(location: str) -> None:
    """One worker: tick until nothing is due (partitions leased by others included)."""
    from stargraph_mem.engine.api import Consolidator

    async with Consolidator.open(location, [PACK], keep_deltas=False) as mem:
        while True:
            report = await mem.tick()
            if not report.due and not report.held:
                return
            if not any(p.applied for p in report.passes):
                await asyncio.sleep(0.5)  # everything left is leased by other workers


async def check(location: str, partitions: int) -> None:
    """Every partition has a current fact, and no delta was applied twice."""
    from stargraph_mem.engine.api import Consolidator
    from stargraph_mem.model.facts import FactPattern

    async with Consolidator.open(location, []) as mem:
        users = {f.user for f in await mem.fact_store.query(FactPattern())}
        ids = Counter(row.delta_id for row in await mem.fact_store.audit_rows())
    assert len(users) == partitions, f"{len(users)} of {partitions} partitions consolidated"
    assert max(ids.values()) == 1, "a delta was applied twice"


def drop(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def server_cpu() -> float | None:
    """CPU seconds of this machine's PostgreSQL processes so far (those that exited
    included: their parent collected them), or ``None`` when there are none to read."""
    ticks, found = 0, False
    for pid in os.listdir("/proc") if Path("/proc").is_dir() else ():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError):
            continue
        if not stat[stat.find("(") + 1 : stat.rfind(")")].startswith("postgres"):
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        found = True
    return ticks / os.sysconf("SC_CLK_TCK") if found else None


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(
    location: str, episodes: Path, workers: int, partitions: int
) -> tuple[float, float, float | None]:
    """Ingest, then time ``workers`` processes consolidating everything: wall seconds,
    the workers' CPU seconds and the local server's (``None`` when not measured)."""
    subprocess.run(
        [sys.executable, "-c", CLI, "ingest", "--db", location, str(episodes)],
        check=True,
        capture_output=True,
    )

    def launch() -> None:
        procs = [
            subprocess.Popen([sys.executable, __file__, "--worker", location])
            for _ in range(workers)
        ]
        for proc in procs:
            if proc.wait() != 0:
                raise SystemExit(f"a worker failed with exit code {proc.returncode}")

    seconds, client, server = measured(launch)
    asyncio.run(check(location, partitions))
    return seconds, client, server


def measured(run: Callable[[], None]) -> tuple[float, float, float | None]:
    """Wall seconds of ``run()``, the CPU seconds of the child processes it waited for,
    and the local server's meanwhile (``None`` when not measured)."""
    server0, client0 = server_cpu(), children_cpu()
    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    client = children_cpu() - client0
    server1 = server_cpu()
    return seconds, client, None if server0 is None or server1 is None else server1 - server0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--each", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-sqlite", action="store_true", help="Skip the SQLite run.")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(work(args.worker))
        return
    total = args.partitions * args.each
    print(f"{total:,} episodes over {args.partitions:,} partitions, rules/default.yaml")
    print(
        f"{'backend':<12} {'workers':>7} {'seconds':>9} {'episodes/s':>11} "
        f"{'worker CPU s':>12} {'server CPU s':>12}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        episodes = Path(tmp) / "episodes.jsonl"
        write_episodes(episodes, args.partitions, args.each)
        runs: list[tuple[str, int, str]] = []
        if not args.no_sqlite:
            runs.append(("sqlite", 1, str(Path(tmp) / "memory.db")))
        for workers in args.workers:
            schema = f"bench_{uuid.uuid4().hex[:12]}"
            runs.append(("postgresql", workers, f"{args.url}?schema={schema}"))
        for backend, workers, location in runs:
            try:
                seconds, client, server = one_run(location, episodes, workers, args.partitions)
            finally:
                if backend == "postgresql":
                    drop(args.url, location.rpartition("=")[2])
            shown = "-" if server is None or backend != "postgresql" else f"{server:.2f}"
            print(
                f"{backend:<12} {workers:>7} {seconds:>9.2f} {total / seconds:>11,.0f} "
                f"{client:>12.2f} {shown:>12}"
            )


if __name__ == "__main__":
    main()
