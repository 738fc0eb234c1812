"""A scheduler process for the lease tests (``tests/test_workers.py``).

Usage::

    python tests/lease_worker.py URL PACK HOLDER LEASE_SECONDS LEASE_BATCH STOP_FILE [STALL_FILE]

It prints ``ready`` once the pack is loaded, and starts ticking when GO_FILE (STOP_FILE's
name with ``.go``) exists, so several workers start together.

Ticks until STOP_FILE exists and a tick finds nothing due (not even partitions another
worker holds), then prints one JSON line: the partitions whose passes this process
applied. With STALL_FILE, the process
stands for one that dies mid-pass: the first time it is about to apply passes it writes
STALL_FILE (with the partitions it holds) and waits forever, holding its leases.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from stargraph_mem.engine.api import Consolidator


async def work(
    url: str, pack: str, holder: str, lease: float, batch: int, stop: Path, stall: Path | None
) -> list[list[str]]:
    applied: list[list[str]] = []
    async with Consolidator.open(url, [pack], holder=holder, lease_seconds=lease) as mem:
        mem.scheduler.lease_batch = batch
        if stall is not None:
            facts = mem.fact_store

            async def stalled(passes: Any, **_: Any) -> Any:
                keys = [p.basis.partition.key for p in passes]
                stall.write_text(json.dumps(keys), "utf-8")
                await asyncio.Event().wait()  # never applies; killed here

            facts.apply_passes = stalled  # type: ignore[method-assign]
        print("ready", flush=True)
        go = stop.with_suffix(".go")
        while not go.exists():
            await asyncio.sleep(0.01)
        while True:
            report = await mem.tick()
            applied += [[p.partition.user, p.partition.agent] for p in report.passes if p.applied]
            if stop.exists() and not report.due and not report.held:
                return applied
            await asyncio.sleep(0.05)


def main(argv: list[str]) -> int:
    url, pack, holder, lease, batch, stop, *rest = argv
    stall = Path(rest[0]) if rest else None
    result = asyncio.run(work(url, pack, holder, float(lease), int(batch), Path(stop), stall))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
