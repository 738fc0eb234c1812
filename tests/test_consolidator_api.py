"""The embeddable Consolidator: concurrent records, what a report says, salience gating
through a swapped-in scorer, facts and explanations."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from e2e_helpers import episode, spo
from pydantic import JsonValue

from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import DuplicateEpisodeError
from stargraph_mem.model.facts import Fact
from stargraph_mem.salience import SalienceContext, SalienceScorer
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.scope import Partition

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)

STREAMING = """\
ir_version: 1
pack: streaming
version: "1.0.0"
fields: {subject: string, predicate: string, object: string, weight: integer}
defaults: {cadence: {every: 1}, confidence: 0.8}
rules:
  - id: known_noop
    priority: 30
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - fact: {as: f, subject: {var: s}, predicate: {var: p}, object: {var: o}}
    emit: {kind: noop, reinforces: [f]}
  - id: changed_update
    priority: 20
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - fact: {as: f, subject: {var: s}, predicate: {var: p}, object: {ne: {var: o}}}
    emit: {kind: update, subject: "{s}", predicate: "{p}", object: "{o}", replaces: [f]}
  - id: new_add
    priority: 10
    salience: {min: 0.3}
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}, weight: {ge: 0}}
      - not: {subject: {var: s}, predicate: {var: p}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
"""


def open_streaming(db: str, **kw: object) -> Consolidator:
    return Consolidator(db, [compile_text(STREAMING)], clock=lambda: NOW, **kw)  # type: ignore[arg-type]


def obs(
    eid: str, obj: str, *, user: str = "alice", weight: JsonValue = 1, minute: int = 0
) -> Episode:
    at = NOW - timedelta(minutes=minute)
    return episode(eid, at=at, user=user, weight=weight, **spo(user, "likes", obj))


async def test_record_is_safe_from_many_concurrent_tasks(new_location: Callable[[], str]) -> None:
    async with open_streaming(new_location()) as mem:
        users = [f"u{n}" for n in range(4)]
        batch = [
            obs(f"{u}-{k}", f"o{k % 3}", user=u, minute=100 - k) for u in users for k in range(25)
        ]
        reports = await asyncio.gather(*(mem.record(e) for e in batch))
        applied = [p for r in reports for p in r.passes if p.applied]
        assert sum(p.episodes for p in applied) == len(batch)  # each consolidated once
        seen = [eid for p in applied for d in p.deltas for eid in d.source_episode_ids]
        assert sorted(seen) == sorted(e.id for e in batch)
        for u in users:
            facts = await mem.facts(user=u, agent="rag")
            assert len(facts) == 1  # (u, likes) is one current fact, however interleaved
        assert all(r.conflicts == [] for r in reports)


async def test_a_report_says_what_fired_counts_rejections_gating_and_timings(
    new_location: Callable[[], str],
) -> None:
    async with open_streaming(new_location()) as mem:
        first = await mem.record(obs("e1", "tea"))
        assert first.fired == {
            "streaming/known_noop": [Partition("alice", "rag")],
            "streaming/changed_update": [Partition("alice", "rag")],
            "streaming/new_add": [Partition("alice", "rag")],
        }
        assert first.counts == {"add": 1, "update": 0, "delete": 0, "noop": 0}
        (one,) = first.passes
        assert one.fired == {"new_add": 1}
        assert set(one.timings) == {"read", "engine", "apply", "total"}
        assert first.timings["total"] >= one.timings["total"] > 0

        assert (await mem.record(obs("e2", "tea"))).counts["noop"] == 1
        assert (await mem.record(obs("e3", "coffee"))).counts["update"] == 1

        bad = await mem.record(obs("e4", "gin", user="bob", weight="heavy"))
        assert [(r.episode_id, r.rule_id) for r in bad.rejected] == [("e4", None)]
        assert bad.rejected[0].reason.startswith("metadata: expected integer")

        # three days old, never accessed: recency e^-3 ≈ 0.05, score ≈ 0.025 < 0.3
        stale = await mem.record(obs("e5", "rum", user="carol", minute=3 * 24 * 60))
        assert stale.gated == ["e5"]
        assert stale.counts == {"add": 0, "update": 0, "delete": 0, "noop": 0}
        assert [e.id for e in await mem.memory.recent("carol", limit=5)] == ["e5"]

        facts = await mem.facts(user="alice", agent="rag")
        assert [f.object for f in facts] == ["coffee"]
        why = await mem.explain(facts[0].id)
        assert why.provenance.rule_id == "changed_update"
        assert [e.id for e in why.source_episodes] == ["e3"]


class Favourites:
    """A custom scorer: only episodes whose object is a favourite score high."""

    def __init__(self, favourites: set[str]) -> None:
        self.favourites = favourites
        self.scored: list[str] = []

    async def score(self, memory: Episode | EpisodeRecord, context: SalienceContext) -> float:
        self.scored.append(memory.id)
        return 1.0 if memory.metadata.get("object") in self.favourites else 0.0


async def test_a_swapped_in_scorer_is_honoured_through_the_protocol(
    new_location: Callable[[], str],
) -> None:
    scorer = Favourites({"tea"})
    assert isinstance(scorer, SalienceScorer)
    async with open_streaming(new_location(), scorer=scorer) as mem:
        kept = await mem.record(obs("e1", "tea", minute=10 * 24 * 60))  # old, but a favourite
        dropped = await mem.record(obs("e2", "jam", user="bob"))  # fresh, but not
        assert (kept.gated, kept.counts["add"]) == ([], 1)
        assert (dropped.gated, dropped.counts["add"]) == (["e2"], 0)
        assert scorer.scored == ["e1", "e2"]
        assert [f.object for f in await mem.facts()] == ["tea"]
        assert [e.id for e in await mem.memory.recent("bob", limit=5)] == ["e2"]


# --- record_many ------------------------------------------------------------------------

STREAM = [
    obs(f"{user}-{k}", obj, user=user, minute=100 - k)
    for k, obj in enumerate(["tea", "tea", "coffee", "jam", "jam", "tea", "coffee"])
    for user in ("alice", "bob", "carol")
]
"""Three partitions; each sees adds, reinforcing repeats and changed objects."""


def fact_rows(facts: list[Fact]) -> list[dict[str, object]]:
    """Facts without the wall-clock time they were recorded at."""
    return [f.model_dump(exclude={"recorded_at"}) for f in facts]


async def test_record_many_gives_the_facts_recording_one_by_one_gives(
    new_location: Callable[[], str],
) -> None:
    async with open_streaming(new_location()) as mem:
        for e in STREAM:
            await mem.record(e)
        one_by_one = fact_rows(await mem.facts())
    async with open_streaming(new_location()) as mem:
        report = await mem.record_many(STREAM[:10])
        report.merge(await mem.record_many(STREAM[10:]))
        batched = fact_rows(await mem.facts())
    assert batched == one_by_one
    assert len(one_by_one) == 3  # one current fact per partition
    assert report.episodes == len(STREAM)  # each episode consolidated once
    assert sum(report.counts.values()) == len(STREAM)


async def test_record_many_checks_each_touched_partition_once(
    new_location: Callable[[], str],
) -> None:
    async with open_streaming(new_location()) as mem:
        report = await mem.record_many(STREAM)
        assert [p.partition.user for p in report.passes] == ["alice", "bob", "carol"]
        assert [p.episodes for p in report.passes] == [7, 7, 7]
        assert report.fired["streaming/new_add"] == [
            Partition(u, "rag") for u in ("alice", "bob", "carol")
        ]
        assert report.now == NOW
        empty = await mem.record_many([])
        assert (empty.passes, empty.due) == ([], [])


async def test_record_many_is_one_transaction(new_location: Callable[[], str]) -> None:
    """An episode id repeated with other content fails the batch: nothing is stored, and no
    rule runs."""
    clash = obs("alice-0", "rum")  # same id as STREAM's first episode, other object
    async with open_streaming(new_location()) as mem:
        with pytest.raises(DuplicateEpisodeError, match="alice-0"):
            await mem.record_many([*STREAM, clash])
        assert await mem.memory.partitions() == []
        assert await mem.facts() == []
        await mem.record(STREAM[0])
        with pytest.raises(DuplicateEpisodeError, match="alice-0"):
            await mem.record_many([STREAM[1], clash])  # clashes with the stored episode
        assert [e.id for e in await mem.memory.recent("bob", limit=5)] == []
        assert [f.object for f in await mem.facts()] == ["tea"]
