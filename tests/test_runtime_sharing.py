"""Consolidators in one process share a pack's CLIPS environment; their passes, run in
worker threads, must take turns and each get its own results."""

from __future__ import annotations

import asyncio
from pathlib import Path

from e2e_helpers import DEFAULT, NOW, episode, spo

from stargraph_mem.engine.api import Consolidator


async def consolidate_one(db: Path, subject: str, n: int) -> list[tuple[str, str, str]]:
    async with Consolidator.open(db, [DEFAULT], max_episodes=7) as mem:
        await mem.memory.put_many(
            [episode(f"{subject}{i}", i, **spo(subject, f"p{i % 5}", f"o{i}")) for i in range(n)]
        )
        await mem.consolidate(now=NOW)
        return sorted((f.subject, f.predicate, f.object) for f in await mem.facts())


async def test_concurrent_consolidators_sharing_a_pack(tmp_path: Path) -> None:
    names = ["ann", "bo", "cy", "di"]
    results = await asyncio.gather(
        *(consolidate_one(tmp_path / f"{name}.db", name, 40) for name in names)
    )
    alone = await consolidate_one(tmp_path / "alone.db", "ann", 40)
    assert results[0] == alone
    for name, facts in zip(names, results, strict=True):
        assert {s for s, _, _ in facts} == {name}
        assert len(facts) == len(alone)
