"""The Consolidator as one node of a plain asyncio workflow.

    observe ──▶ remember (Consolidator.record) ──▶ answer (Consolidator.facts)

Three agent turns flow through queues, one turn at a time: ``remember`` records each
turn's observation and waits until ``answer`` has answered it. The pack's rules run on
``every: 1``, so the fact is consolidated before the turn moves on and ``answer`` sees it
at once. A final ``tick`` runs whatever else is due, and ``explain``
says why the last answer holds.

    python examples/pipeline.py [DB]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stargraph_mem import Consolidator, Episode

PACK = Path(__file__).with_name("streaming_dedup.yaml")
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
TURNS = [
    ("Alice likes tea", {"subject": "alice", "predicate": "likes", "object": "tea"}),
    ("Alice mentions tea again", {"subject": "alice", "predicate": "likes", "object": "tea"}),
    ("Alice now prefers coffee", {"subject": "alice", "predicate": "likes", "object": "coffee"}),
]

Turn = tuple[int, str, dict[str, str]]


async def observe(out: asyncio.Queue[Turn | None]) -> None:
    """Emit the conversation's turns, then the end marker."""
    for n, (text, meta) in enumerate(TURNS):
        await out.put((n, text, meta))
    await out.put(None)


LATEST = [T0]
"""The consolidator's clock: the time of the latest turn (a pass consumes only episodes
stamped at or before its time)."""


async def remember(
    mem: Consolidator, inbox: asyncio.Queue[Turn | None], out: asyncio.Queue[Turn | None]
) -> None:
    """Record each turn as an episode; print what consolidation did with it."""
    while (turn := await inbox.get()) is not None:
        n, text, meta = turn
        LATEST[0] = T0 + timedelta(minutes=n)  # the turn happens now
        episode = Episode(
            id=f"turn{n}",
            content=text,
            timestamp=LATEST[0],
            user="alice",
            session="s1",
            agent="rag",
            metadata=dict(meta),
        )
        report = await mem.record(episode)
        kinds = ", ".join(f"{k}={v}" for k, v in report.counts.items() if v)
        print(f"remember turn{n}: {kinds}")
        await out.put(turn)
        await out.join()  # the turn is answered before the next one is remembered
    await out.put(None)


async def answer(mem: Consolidator, inbox: asyncio.Queue[Turn | None]) -> None:
    """Answer from the consolidated facts after each turn."""
    while (turn := await inbox.get()) is not None:
        facts = await mem.facts(user="alice", agent="rag")
        print(
            f"answer turn{turn[0]}: "
            + "; ".join(f"{f.subject} {f.predicate} {f.object}" for f in facts)
        )
        inbox.task_done()


async def main(db: Path) -> None:
    LATEST[0] = T0
    async with Consolidator.open(db, packs=[PACK], clock=lambda: LATEST[0]) as mem:
        turns: asyncio.Queue[Turn | None] = asyncio.Queue()
        remembered: asyncio.Queue[Turn | None] = asyncio.Queue()
        await asyncio.gather(
            observe(turns), remember(mem, turns, remembered), answer(mem, remembered)
        )
        report = await mem.tick()
        print(f"tick: {len(report.passes)} passes due")
        facts = await mem.facts(user="alice", agent="rag")
        why = await mem.explain(facts[0].id)
        print(f"why: {why.provenance.rule_id}: {why.provenance.reason}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(Path(sys.argv[1])))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(main(Path(tmp) / "memory.db"))
