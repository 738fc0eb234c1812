"""Scheduler worker for the restart and two-process tests.

Usage::

    python tests/scheduler_worker.py record DB PACK NAME COUNT [USERS [GO_FILE]]
    python tests/scheduler_worker.py tick DB PACK NOW_ISO

``record`` stores COUNT episodes named ``NAME-<n>`` round-robin over USERS (default 3)
partitions through ``Consolidator.record`` and ticks after every few, then prints one JSON
line: passes applied, conflicts, ticks that found the lease held elsewhere. With GO_FILE it
prints ``ready`` once the pack is loaded and waits for that file to exist before recording
(so two workers start together). ``tick`` runs one tick at NOW_ISO and prints the pass
count as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.models import Episode

T0 = datetime(2026, 5, 1, tzinfo=UTC)


async def record(
    db: Path, pack: Path, name: str, count: int, users: int, go: Path | None
) -> dict[str, int]:
    """Record ``count`` episodes (ticking every 5) and tally what this process applied."""
    tally = {"passes": 0, "conflicts": 0, "lease_held": 0, "ticks_ran": 0}
    async with Consolidator.open(db, [pack], holder=name, lease_seconds=0.05) as mem:
        if go is not None:
            print("ready", flush=True)
            while not go.exists():
                await asyncio.sleep(0.005)
        for n in range(count):
            episode = Episode(
                id=f"{name}-{n}",
                content=f"{name} says {n}",
                timestamp=T0 + timedelta(seconds=n),
                user=f"u{n % users}",
                session=name,
                agent="rag",
                metadata={"subject": f"{name}-{n}", "predicate": "said", "object": str(n)},
            )
            reports = [await mem.record(episode)]
            if n % 5 == 4:
                reports.append(await mem.tick())
            if go is not None:
                # a short gap between records: the other worker, backing off after a busy
                # refusal, finds the file free instead of waiting until this one is done
                await asyncio.sleep(0.001)
            for report in reports:
                tally["passes"] += sum(1 for p in report.passes if p.applied)
                tally["conflicts"] += len(report.conflicts)
                tally["lease_held"] += 0 if report.ran else 1
            tally["ticks_ran"] += 1 if n % 5 == 4 and reports[-1].ran else 0
    return tally


async def tick(db: Path, pack: Path, now: datetime) -> dict[str, int]:
    """One tick at ``now``: how many passes it applied."""
    async with Consolidator.open(db, [pack], clock=lambda: now) as mem:
        report = await mem.tick()
        return {"passes": len(report.passes), "episodes": sum(p.episodes for p in report.passes)}


def main(argv: list[str]) -> int:
    command, db, pack, *rest = argv
    if command == "record":
        users = int(rest[2]) if len(rest) > 2 else 3
        go = Path(rest[3]) if len(rest) > 3 else None
        result = asyncio.run(record(Path(db), Path(pack), rest[0], int(rest[1]), users, go))
    else:
        result = asyncio.run(tick(Path(db), Path(pack), datetime.fromisoformat(rest[0])))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
