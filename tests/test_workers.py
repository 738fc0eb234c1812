"""Several scheduler processes on one PostgreSQL memory: partitions are leased, a worker
killed mid-pass loses its leases when they expire and another finishes its partitions,
no pass is applied twice and the facts are those one process alone makes."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from backends import PG_URL, pg_schema
from e2e_helpers import episode, spo

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import FactPattern

WORKER = Path(__file__).with_name("lease_worker.py")
PACK = """\
ir_version: 1
pack: shared
version: "1.0.0"
fields: {subject: string, predicate: string, object: string}
defaults: {cadence: {every: 2}, confidence: 0.8}
rules:
  - id: latest
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
"""
PARTITIONS = 40
EACH = 6
LEASE = 2.0


def episodes() -> list[Episode]:
    return [
        episode(f"u{u}-{n}", n, user=f"u{u}", **spo(f"u{u}", "likes", f"thing{n % 3}"))
        for u in range(PARTITIONS)
        for n in range(EACH)
    ]


def start(url: str, pack: Path, holder: str, stop: Path, *stall: Path) -> subprocess.Popen[str]:
    args = [url, str(pack), holder, str(LEASE), "5", str(stop), *map(str, stall)]
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def finish(proc: subprocess.Popen[str]) -> list[tuple[str, str]]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return [(user, agent) for user, agent in json.loads(out.splitlines()[-1])]


async def facts_of(location: str) -> Counter[tuple[str, str, str, str, float]]:
    async with Consolidator.open(location, []) as mem:
        facts = await mem.fact_store.query(FactPattern())
    return Counter((f.user, f.subject, f.predicate, f.object, f.confidence) for f in facts)


async def delta_ids(location: str) -> Counter[str]:
    async with Consolidator.open(location, []) as mem:
        return Counter(row.delta_id for row in await mem.fact_store.audit_rows())


def test_workers_share_a_memory_and_finish_what_a_killed_one_held(tmp_path: Path) -> None:
    pack = tmp_path / "shared.yaml"
    pack.write_text(PACK, "utf-8")
    stop, stall = tmp_path / "stop", tmp_path / "stall"

    async def scenario() -> None:
        async with pg_schema() as schema:
            url = f"{PG_URL}?schema={schema}"
            async with Consolidator.open(url, [pack]) as mem:
                await mem.memory.put_many(episodes())
            # a worker that dies mid-pass: it leased partitions and computed their passes
            never = tmp_path / "never"  # the dying worker's stop file: never made
            dying = start(url, pack, "far-away-machine", never, stall)
            never.with_suffix(".go").touch()
            await asyncio.to_thread(wait_for, stall, dying)
            held = json.loads(stall.read_text("utf-8"))
            dying.send_signal(signal.SIGKILL)
            dying.wait(timeout=30)
            assert held, "the dying worker held no partition"
            killed_at = time.monotonic()
            workers = [start(url, pack, f"worker-{n}", stop) for n in range(2)]
            for worker in workers:  # both loaded, then both start at once
                assert worker.stdout is not None
                assert await asyncio.to_thread(worker.stdout.readline) == "ready\n"
            stop.touch()
            stop.with_suffix(".go").touch()
            results = [await asyncio.to_thread(finish, w) for w in workers]
            # every partition was consolidated once, the dying worker's after its lease
            done = [p for result in results for p in result]
            assert sorted(done) == sorted((f"u{u}", "rag") for u in range(PARTITIONS))
            assert all(result for result in results), "one worker did all the work"
            assert time.monotonic() - killed_at >= LEASE
            ids = await delta_ids(url)
            assert ids and max(ids.values()) == 1
            assert sum(ids.values()) == PARTITIONS * EACH
            # the same facts as one process alone, on SQLite
            alone = tmp_path / "alone.db"
            async with Consolidator.open(alone, [pack]) as solo:
                await solo.memory.put_many(episodes())
                await solo.tick()
            assert await facts_of(url) == await facts_of(str(alone))

    asyncio.run(scenario())
