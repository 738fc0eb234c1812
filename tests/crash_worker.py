"""Crash-test worker: consolidate a database until done (the crash test kills it midway).

Usage: ``python tests/crash_worker.py DB NOW_ISO MAX_EPISODES PACK``. Prints ``ready`` once
the stores are open and the pack is loaded, and ``done`` when every partition is caught up.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime
from pathlib import Path

from stargraph_mem.engine.api import Consolidator, runtime_for


async def consolidate(db: Path, now: datetime, max_episodes: int, pack: Path) -> None:
    """Open the stores, load the pack into CLIPS, announce readiness, consolidate."""
    async with Consolidator.open(db, [pack], max_episodes=max_episodes) as c:
        for compiled in c.packs:
            runtime_for(compiled)
        print("ready", flush=True)
        await c.consolidate(now=now)
    print("done", flush=True)


def main(argv: list[str]) -> int:
    db, now, max_episodes, pack = argv
    asyncio.run(consolidate(Path(db), datetime.fromisoformat(now), int(max_episodes), Path(pack)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
