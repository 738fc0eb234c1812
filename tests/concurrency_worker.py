"""One process of the concurrency tests: runs a plan of operations against one database.

Usage::

    python tests/concurrency_worker.py PLAN_JSON

The plan is a JSON object: ``db``, ``packs`` (YAML paths), ``name``, ``now`` (ISO time
every operation runs at, so deltas do not depend on the wall clock), ``go`` (a file to
wait for, so processes start together) and ``ops``, each one of
``["record", episode]``, ``["put", episode]``, ``["consolidate"]``,
``["consolidate_user", user]``, ``["tick"]`` and ``["run_once"]`` (a fresh
``Consolidator`` that ticks once and closes, as ``stargraph-mem run --once`` does).
Prints one JSON line: the number of each operation done.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.models import Episode


async def main(plan: dict[str, Any]) -> Counter[str]:
    now = datetime.fromisoformat(plan["now"])
    db = Path(plan["db"])
    packs = [Path(p) for p in plan["packs"]]
    done: Counter[str] = Counter()
    go = Path(plan["go"])
    async with Consolidator.open(
        db, packs, clock=lambda: now, holder=plan["name"], lease_seconds=0.02, worker="never"
    ) as mem:
        await mem.bootstrap()
        print("ready", flush=True)
        while not go.exists():
            await asyncio.sleep(0.002)
        for op in plan["ops"]:
            kind = op[0]
            if kind == "record":
                await mem.record(Episode.model_validate(op[1]))
            elif kind == "put":
                episode = Episode.model_validate(op[1])
                await mem.memory.put(
                    episode, user=episode.user, session=episode.session, agent=episode.agent
                )
            elif kind == "consolidate":
                await mem.consolidate(now=now)
            elif kind == "consolidate_user":
                await mem.consolidate(user=op[1], now=now)
            elif kind == "tick":
                await mem.tick(now)
            elif kind == "run_once":
                async with Consolidator.open(db, packs, clock=lambda: now) as other:
                    await other.tick(now)
            else:
                raise ValueError(f"unknown operation {kind!r}")
            done[kind] += 1
    return done


if __name__ == "__main__":
    result = asyncio.run(main(json.loads(Path(sys.argv[1]).read_text("utf-8"))))
    print(json.dumps(dict(result)), flush=True)
