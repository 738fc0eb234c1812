"""Batched passes mean what partition-by-partition passes mean: a partition's rules only see
its own episodes and facts, even when every partition of a batch states the same triples
at the same times, and the stores end up the same for every shipped pack."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from backends import NewLocation
from e2e_helpers import NOW, RULES, Outcome, episode, outcome
from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.sweep import swept
from stargraph_mem.model.facts import FactPattern
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.sqlite_fact import PassWrite, SQLiteFactStore

PACKS = sorted(RULES.glob("*.yaml"))
EPISODE_PACKS = [p for p in PACKS if any(not swept(r) for r in compile_file(p).rules)]
"""The shipped packs with an episode rule (a pack of sweeps only makes no episode pass)."""
SCOPES = [("alice", "rag"), ("bob", "rag"), ("alice", "chat")]


def colliding() -> list[Episode]:
    """Every scope states the same triples, with the same contents at the same times."""
    out: list[Episode] = []
    for n, (s, p, o) in enumerate([("ann", "likes", "tea"), ("ann", "likes", "gin")] * 2):
        for user, agent in SCOPES:
            out.append(
                episode(
                    f"{user}-{agent}-{n}",
                    n,
                    user=user,
                    agent=agent,
                    session=f"s{n}",
                    content="the same words",
                    subject=s,
                    predicate=p,
                    object=o,
                )
            )
    return out


async def batched(path: Path, packs: Sequence[Path], episodes: Sequence[Episode], **kw: Any) -> int:
    """Store ``episodes`` and consolidate them all at once; how many passes were applied
    in transactions shared with other partitions."""
    shared = 0
    original = SQLiteFactStore.apply_passes

    async def counting(self: SQLiteFactStore, passes: Sequence[PassWrite], **k: Any) -> Any:
        nonlocal shared
        shared += sum(1 for p in passes if p.watermarks)  # episode passes (not sweeps)
        return await original(self, passes, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SQLiteFactStore, "apply_passes", counting)
        async with Consolidator.open(path, packs, **kw) as c:
            await c.memory.put_many(episodes)
            await c.consolidate(now=NOW)
    return shared


async def one_by_one(
    path: Path | str, packs: Sequence[Path], episodes: Sequence[Episode], **kw: Any
) -> None:
    """Store ``episodes`` and consolidate each partition by itself, pack after pack (the
    episode rules: sweeps run apart, over candidate facts, and these episodes make none)."""
    async with Consolidator.open(path, packs, **kw) as c:
        await c.memory.put_many(episodes)
        partitions = await c.memory.partitions()
        for runner in c.runners:
            rule_ids = [r.id for r in runner.rules_of(None) if not swept(r)]
            for partition in partitions:
                await runner.run(partition, now=NOW, rule_ids=rule_ids)


def both(
    packs: Sequence[Path], episodes: Sequence[Episode], **kw: Any
) -> tuple[Outcome, Outcome, int]:
    with tempfile.TemporaryDirectory() as tmp:
        shared = asyncio.run(batched(Path(tmp) / "batched.db", packs, episodes, **kw))
        asyncio.run(one_by_one(Path(tmp) / "alone.db", packs, episodes, **kw))
        return outcome(Path(tmp) / "batched.db"), outcome(Path(tmp) / "alone.db"), shared


def test_partitions_of_one_batch_never_see_each_other() -> None:
    got, want, shared = both(PACKS, colliding())
    assert shared == len(SCOPES) * len(
        EPISODE_PACKS
    )  # every pass went through a shared transaction
    assert got == want
    # each scope holds its own current fact, citing only its own episodes
    current: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    for row in got.current:
        current.setdefault((row[1], row[2]), set()).add(row[3:6])
    assert set(current) == set(SCOPES)
    assert len({frozenset(triples) for triples in current.values()}) == 1
    assert ("ann", "likes", "gin") in current[SCOPES[0]]
    for row in got.lineage:
        fact_scope = next(r[1:3] for r in got.current + got.history if r[0] == row[0])
        assert all(src.startswith("-".join(fact_scope) + "-") for src in json.loads(row[4]))


items = st.tuples(
    st.sampled_from([*SCOPES, ("carol", "rag")]),
    st.sampled_from(["ann", "bo"]),
    st.sampled_from(["likes", "is"]),
    st.sampled_from(["x", "y"]),
    st.sampled_from([None, None, None, "noop"]),
    st.sampled_from([None, 0.2, 0.9]),
)


def stream(drawn: Sequence[tuple[Any, ...]]) -> list[Episode]:
    """One episode per item; every three share a minute (timestamps collide across scopes)."""
    out: list[Episode] = []
    for n, ((user, agent), s, p, o, intent, importance) in enumerate(drawn):
        meta: dict[str, Any] = {"subject": s, "predicate": p, "object": o}
        if intent is not None:
            meta["intent"] = intent
        if importance is not None:
            meta["importance"] = importance
        out.append(episode(f"e{n}", n // 3, user=user, agent=agent, session=f"s{n % 2}", meta=meta))
    return out


@settings(max_examples=15, deadline=None)
@given(drawn=st.lists(items, min_size=1, max_size=30), max_episodes=st.sampled_from([4, 1000]))
def test_batched_passes_equal_partition_by_partition_ones(
    drawn: list[tuple[Any, ...]], max_episodes: int
) -> None:
    got, want, shared = both(PACKS, stream(drawn), max_episodes=max_episodes)
    assert got == want
    if max_episodes == 1000 and len({item[0] for item in drawn}) > 1:
        assert shared > 0


async def readable(location: str) -> list[tuple[Any, ...]]:
    """Every fact (history too) as a user reads it, with the episodes it cites."""
    async with Consolidator.open(location, []) as c:
        facts = await c.fact_store.query(FactPattern(include_history=True))
        rows = []
        for f in facts:
            why = await c.fact_store.explain(f.id)
            sources = tuple(sorted(e.id for e in why.source_episodes))
            rows.append((f.user, f.agent, f.subject, f.predicate, f.object, f.confidence,
                         f.valid_until is None, sources))  # fmt: skip
    return sorted(rows)


async def test_batches_keep_partitions_apart_on_every_backend(new_location: NewLocation) -> None:
    """The colliding scopes through one batch on each backend, against each partition
    consolidated alone: the same facts, each citing only its own scope's episodes."""
    together, alone = new_location(), new_location()
    async with Consolidator.open(together, PACKS) as c:
        await c.memory.put_many(colliding())
        report = await c.consolidate(now=NOW)
        episode_passes = [p for p in report.passes if not p.sweep]
        assert len(episode_passes) == len(SCOPES) * len(EPISODE_PACKS)
    await one_by_one(alone, PACKS, colliding())
    got = await readable(together)
    assert got == await readable(alone)
    objects: dict[tuple[str, str], set[str]] = {}
    for r in got:
        if r[6] and r[3] == "likes":
            objects.setdefault((r[0], r[1]), set()).add(r[4])
    assert set(objects) == set(SCOPES) and len({frozenset(o) for o in objects.values()}) == 1
    assert "gin" in objects[SCOPES[0]]
    for row in got:
        assert all(src.startswith(f"{row[0]}-{row[1]}-") for src in row[7])


def test_running_no_rule_makes_no_pass() -> None:
    """An empty selection of rules (a pack of sweeps asked for its episode rules) returns
    at once: more episodes than a pass reads must not make it read the same ones forever."""

    async def run(path: Path) -> list[object]:
        async with Consolidator.open(path, [RULES / "default.yaml"], max_episodes=4) as c:
            await c.memory.put_many(stream([(SCOPES[0], "ann", "likes", "x", None, None)] * 9))
            (partition,) = await c.memory.partitions()
            (runner,) = c.runners
            reports = await asyncio.wait_for(runner.run(partition, now=NOW, rule_ids=[]), 10)
            assert await runner.pending(partition) == 9  # nothing consumed
            return list(reports)

    with tempfile.TemporaryDirectory() as tmp:
        assert asyncio.run(run(Path(tmp) / "m.db")) == []
